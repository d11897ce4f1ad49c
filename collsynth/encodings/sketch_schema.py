"""Declared schemas of the two communication-sketch JSON formats (ours, `collsynth.sketch/1`, and TACCL's):
exact types (no `"4"` for 4, no `true` for 1, no 4.0), ranges with the sanity caps, unknown keys an error
naming the closest known key, the format checked. `Sketch.from_dict` / `sketch_from_taccl` check a document
here first; what depends on the topology (local ranks below GPUs per node, links) stays in `Sketch.check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from collsynth.core.caps import CHUNKS_PER_RANK, RANKS
from collsynth.core.schema import Strict, capped, check

LocalRank = Annotated[int, Field(ge=0), capped(RANKS)]
RankKey = Annotated[str, StringConstraints(pattern=r"^[0-9]{1,9}$")]  # a JSON object key naming a local rank
Pair = Annotated[list[LocalRank], Field(min_length=2, max_length=2)]
Nodes = Annotated[int, Field(ge=1), capped(RANKS)]
Chunkup = Annotated[int, Field(ge=1), capped(CHUNKS_PER_RANK)]


class SwitchEntry(Strict):
    ranks: Annotated[list[LocalRank], Field(min_length=2)]
    connections: Literal["min", "max", "any"] = "any"


class IntraNode(Strict):
    strategy: Literal["free", "switch"] = "free"
    switches: list[SwitchEntry] = []


class InterNode(Strict):
    strategy: Literal["relay"] = "relay"
    connections: Literal["direct", "all"] | list[Pair] = "all"
    senders: dict[RankKey, list[LocalRank]] = {}
    senders_first: bool = False
    max_together: Annotated[int, Field(ge=1), capped(CHUNKS_PER_RANK)] = 6


class SymmetryEntry(Strict):
    offset: Annotated[int, Field(ge=0), capped(RANKS)]
    group: Annotated[int, Field(ge=1), capped(RANKS)]


class SketchDocument(Strict):
    format: Literal["collsynth.sketch/1"] = "collsynth.sketch/1"
    name: Annotated[str, Field(max_length=1000)] = ""
    nodes: Nodes = 1
    chunkup: Chunkup = 1
    routes: Literal["auto", "shortest", "any"] = "auto"
    intra_node: IntraNode = IntraNode()
    inter_node: InterNode | None = None
    symmetry: list[SymmetryEntry] = []


class TacclIntraNode(Strict):
    strategy: Literal["none", "switch"] = "none"
    switches: list[Annotated[list[LocalRank], Field(min_length=2)]] | None = None
    switch_hyperedge_strategy: list[Literal["uc-min", "uc-max"]] | None = None


class TacclInterNode(Strict):
    strategy: Literal["relay"] = "relay"
    internode_conn: Literal["direct-map", "fully-connected"] | dict[RankKey, list[LocalRank]] = "fully-connected"
    gpus_to_sender_rev_map: dict[RankKey, list[LocalRank]] | None = None
    enforce_ordering: bool = False


class TacclHyperparameters(Strict):
    input_chunkup: Chunkup = 1


class TacclSketchDocument(Strict):
    nnodes: Nodes = 1
    intranode_sketch: TacclIntraNode = TacclIntraNode()
    internode_sketch: TacclInterNode | None = None
    symmetry_offsets: list[Pair] = []
    hyperparameters: TacclHyperparameters = TacclHyperparameters()


def check_sketch_document(data: Any, error: type[Exception], *, taccl: bool) -> None:
    """Raise `error` (one line: `sketch: FIELD: problem; fix`) unless `data` matches the sketch schema (TACCL's
    with `taccl`)."""
    if not isinstance(data, Mapping):
        raise error("a sketch JSON file holds one object; see docs/formats.md")
    check(TacclSketchDocument if taccl else SketchDocument, data, "sketch" if not taccl else "TACCL sketch", error)
