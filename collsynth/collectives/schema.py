"""The declared schema of collective files (`Collective.to_dict`, docs/formats.md): exact types, unknown keys
refused with the closest valid key, ranks and chunks within the sanity caps."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field

from collsynth.core.caps import CHUNKS, CHUNKS_PER_RANK, PLACEMENTS, RANKS
from collsynth.core.schema import Strict, check

Index = Annotated[int, Field(ge=0)]
Count = Annotated[int, Field(ge=1)]
Placement = Annotated[list[Index], Field(min_length=3, max_length=3)]  # [chunk, rank, index]


class CollectiveSchema(Strict):
    name: str
    num_ranks: Count
    chunks: Count = 1
    root: Index | None = None
    inplace: bool = False
    combining: bool = False
    num_chunks: Index | None = None  # written by to_dict; derived from the placements when read
    input_chunks: Index | None = None
    output_chunks: Index | None = None
    inputs: list[Placement] | None = None
    outputs: list[Placement] | None = None


def check_collective_dict(data: Any, label: str, error: type[Exception]) -> CollectiveSchema:
    """Validate a collective document and the caps; raise `error` (one line naming `label`) otherwise."""
    doc = check(CollectiveSchema, data, label, error)
    RANKS.check(doc.num_ranks, f"{label}: num_ranks", error)
    CHUNKS_PER_RANK.check(doc.chunks, f"{label}: chunks", error)
    if doc.inputs is None:  # a standard collective places up to ranks^2 x chunks chunks (AllGather, AllToAll)
        PLACEMENTS.check(doc.num_ranks ** 2 * doc.chunks, f"{label}: num_ranks^2 x chunks", error)
    for key, placement in (("inputs", doc.inputs), ("outputs", doc.outputs)):
        if placement is not None:
            CHUNKS.check(len(placement), f"{label}: {key}", error)
            CHUNKS.check(max((max(p[0], p[2]) for p in placement), default=0), f"{label}: {key} chunk/index",
                         error)
    for key in ("input_chunks", "output_chunks"):
        value = getattr(doc, key)
        if value is not None:
            CHUNKS.check(value, f"{label}: {key}", error)
    if (doc.inputs is None) != (doc.outputs is None):
        raise error(f"{label}: give both 'inputs' and 'outputs' (a user-defined collective) or neither (a standard "
                    "one by name)")
    return doc
