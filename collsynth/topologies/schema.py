"""The declared schema of topology files: our own (`Topology.to_dict`) and TACCL topology profiles.

`topology_from_dict` validates a parsed document (exact types, finite non-negative costs, unknown keys refused
with the closest valid key) and checks the sanity caps (ranks, links) before anything is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field

from collsynth.core.caps import LINKS, RANKS
from collsynth.core.schema import Strict, check

NonNegative = Annotated[float, Field(ge=0)]
Positive = Annotated[float, Field(gt=0)]
Index = Annotated[int, Field(ge=0)]
Count = Annotated[int, Field(ge=1)]


class LinkSchema(Strict):
    src: Index
    dst: Index
    bandwidth: Count = 1
    alpha_us: NonNegative | None = None
    beta_us_per_mb: NonNegative | None = None
    kind: str = "nvlink"


class SwitchSchema(Strict):
    name: str
    links: list[Annotated[list[Index], Field(min_length=2, max_length=2)]]
    bandwidth: Count = 1
    beta_us_per_mb: NonNegative | None = None


class TopologySchema(Strict):
    name: str = "custom"
    num_ranks: Count
    links: list[LinkSchema]
    switches: list[SwitchSchema] = []
    nodes: list[Index] | None = None
    nics: list[list[Index]] = []
    description: str = ""


class TacclProfileSchema(Strict):
    """A TACCL topology profile (microsoft/taccl `examples/topo`) plus our optional extensions."""

    name: str = ""
    gpus_per_node: Count
    alpha: NonNegative
    node_betas_list: list[Positive] | None = None
    node_invbws_list: list[Positive] | None = None
    links: list[list[NonNegative]] | None = None
    betas: list[list[NonNegative]] | None = None
    invbws: list[list[NonNegative]] | None = None
    nics_per_node: Count | None = None
    remote_alpha: NonNegative | None = None
    remote_beta: NonNegative | None = None
    remote_invbw: NonNegative | None = None
    chunk_bytes: Positive | None = None
    cost_scale: Positive | None = None
    nnodes: Count | None = None


def check_topology_dict(data: Any, label: str, error: type[Exception]) -> TopologySchema:
    """Validate our topology schema and the caps; raise `error` (one line naming `label`) otherwise."""
    schema = check(TopologySchema, data, label, error)
    RANKS.check(schema.num_ranks, f"{label}: num_ranks", error)
    LINKS.check(len(schema.links), f"{label}: links", error)
    return schema


def check_taccl_dict(data: Mapping[str, Any], label: str, error: type[Exception]) -> TacclProfileSchema:
    """Validate a TACCL profile and the caps (nodes x gpus_per_node ranks); raise `error` otherwise."""
    schema = check(TacclProfileSchema, data, label, error)
    RANKS.check(schema.gpus_per_node * (schema.nnodes or 1), f"{label}: gpus_per_node x nnodes", error)
    return schema
