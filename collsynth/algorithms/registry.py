"""The library's registry: name -> (builder, collective, shape constraints, description), read-only.

`library_programs(topology, collective)` builds every library program that fits a topology, with
parameters chosen for it; the catalog and the regression suite compile what it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Any

from collsynth.algorithms._common import AlgorithmError, find_ring, is_power_of_two, ring_links_ok
from collsynth.algorithms.allpairs import allpairs_allreduce_one_phase, allpairs_allreduce_two_phase, allpairs_alltoall
from collsynth.algorithms.alltonext import alltonext
from collsynth.algorithms.hierarchical import hierarchical_allreduce, three_step_alltoall, two_step_alltoall
from collsynth.algorithms.recursive import recursive_doubling_allgather, recursive_halving_doubling_allreduce
from collsynth.algorithms.ring import ring_allgather, ring_allreduce, ring_reducescatter
from collsynth.algorithms.trees import binomial_tree_allreduce, double_binary_tree_allreduce
from collsynth.collectives.spec import canonical_name
from collsynth.language.program import Program, ProgramError
from collsynth.topologies.model import Link, Topology


def _any_ranks(num_ranks: int, num_nodes: int) -> str | None:
    return None if num_ranks >= 2 else "needs at least 2 ranks"


def _power_of_two(num_ranks: int, num_nodes: int) -> str | None:
    return None if num_ranks >= 2 and is_power_of_two(num_ranks) else "needs a power-of-two number of ranks"


def _multi_node(num_ranks: int, num_nodes: int) -> str | None:
    if num_nodes < 2:
        return "needs at least 2 nodes"
    if num_ranks % num_nodes:
        return "needs the same number of GPUs on every node"
    return None


@dataclass(frozen=True)
class LibraryEntry:
    name: str
    builder: Callable[..., Program]
    collective: str  # canonical collective name (`collsynth.collectives.canonical_name`)
    parameters: tuple[str, ...]  # keyword parameters besides topology, instances, protocol
    ranks: str  # valid rank counts, in words
    shape_error: Callable[[int, int], str | None]  # (num_ranks, num_nodes) -> why not, or None
    description: str
    inplace: bool = True  # whether inplace=True is supported
    multi_node: bool = False  # needs a node structure (topology.machines or num_nodes)

    def fits(self, num_ranks: int, num_nodes: int = 1) -> str | None:
        """None if the program can be built for this shape, else the reason it cannot."""
        return self.shape_error(num_ranks, num_nodes)

    def __str__(self) -> str:
        return f"{self.name} ({self.collective}; {self.ranks}): {self.description}"


_ENTRIES = (
    LibraryEntry("ring_allgather", ring_allgather, "allgather", ("channels", "ring", "inplace"), "any n >= 2",
                 _any_ranks, "ring, one chunk per channel; odd channels run the ring backwards"),
    LibraryEntry("ring_reducescatter", ring_reducescatter, "reducescatter", ("channels", "ring", "inplace"),
                 "any n >= 2", _any_ranks, "ring, one chunk per channel; odd channels run the ring backwards"),
    LibraryEntry("ring_allreduce", ring_allreduce, "allreduce", ("channels", "ring", "inplace"), "any n >= 2",
                 _any_ranks, "ring ReduceScatter then ring AllGather, multi-channel"),
    LibraryEntry("allpairs_allreduce_one_phase", allpairs_allreduce_one_phase, "allreduce", ("chunks", "inplace"),
                 "any n >= 2", _any_ranks, "every rank fetches every buffer and reduces locally (1 step)"),
    LibraryEntry("allpairs_allreduce_two_phase", allpairs_allreduce_two_phase, "allreduce", ("chunks", "inplace"),
                 "any n >= 2", _any_ranks, "all-pairs ReduceScatter then all-pairs AllGather (2 steps)"),
    LibraryEntry("recursive_doubling_allgather", recursive_doubling_allgather, "allgather", ("chunks", "inplace"),
                 "powers of two", _power_of_two, "log2(n) rounds, exchanged blocks double"),
    LibraryEntry("recursive_halving_doubling_allreduce", recursive_halving_doubling_allreduce, "allreduce",
                 ("chunks", "inplace"), "powers of two", _power_of_two,
                 "Rabenseifner: recursive-halving ReduceScatter, recursive-doubling AllGather"),
    LibraryEntry("binomial_tree_allreduce", binomial_tree_allreduce, "allreduce", ("chunks", "segments", "inplace"),
                 "any n >= 2", _any_ranks, "binomial-tree reduce to rank 0 and broadcast back"),
    LibraryEntry("double_binary_tree_allreduce", double_binary_tree_allreduce, "allreduce",
                 ("chunks", "segments", "inplace"), "any n >= 2", _any_ranks,
                 "two complementary binary trees, half the buffer each, pipelined segments"),
    LibraryEntry("hierarchical_allreduce", hierarchical_allreduce, "allreduce", ("num_nodes", "chunks", "inplace"),
                 "nodes >= 2, equal GPUs per node", _multi_node,
                 "intra-node RS, inter-node RS, inter-node AG, intra-node AG (rings)", multi_node=True),
    LibraryEntry("allpairs_alltoall", allpairs_alltoall, "alltoall", ("chunks", "inplace"), "any n >= 2",
                 _any_ranks, "one direct copy per rank pair"),
    LibraryEntry("two_step_alltoall", two_step_alltoall, "alltoall", ("num_nodes", "chunks"),
                 "nodes >= 2, equal GPUs per node", _multi_node,
                 "gather per destination GPU index, then one inter-node copy per GPU and node",
                 inplace=False, multi_node=True),
    LibraryEntry("three_step_alltoall", three_step_alltoall, "alltoall", ("num_nodes", "chunks"),
                 "nodes >= 2, equal GPUs per node", _multi_node,
                 "gather on a gateway GPU, one bulk copy per node pair, scatter", inplace=False, multi_node=True),
    LibraryEntry("alltonext", alltonext, "alltonext", ("num_nodes", "chunks"), "any n >= 2", _any_ranks,
                 "rank r -> rank r+1; node-crossing hops spread over every GPU's NIC", inplace=False),
)

LIBRARY: Mapping[str, LibraryEntry] = MappingProxyType({entry.name: entry for entry in _ENTRIES})


def library_entry(name: str) -> LibraryEntry:
    """A library entry by name (`-` and `_` are the same)."""
    key = name.strip().lower().replace("-", "_")
    if key not in LIBRARY:
        raise AlgorithmError(f"unknown library program {name!r}; `collsynth algorithms list` shows them: "
                             f"{', '.join(LIBRARY)}")
    return LIBRARY[key]


def build(name: str, topology: Topology, **params: Any) -> Program:
    """Build one library program by name (parameters as its builder takes them)."""
    entry = library_entry(name)
    why = entry.fits(topology.num_ranks, topology.num_machines if params.get("num_nodes") is None
                     else int(params["num_nodes"]))
    if why is not None:
        hint = "; pass num_nodes= or use a multi-node topology (e.g. 2xndv4)" if entry.multi_node else ""
        raise AlgorithmError(f"{entry.name}: {why} ({entry.ranks}); got {topology.num_ranks} ranks on "
                             f"{topology.num_machines} node(s){hint}")
    return entry.builder(topology, **params)


def suggested_parameters(entry: LibraryEntry, topology: Topology) -> dict[str, Any]:
    """Parameters that suit the topology: both ring directions when every ring link exists both ways."""
    if "channels" in entry.parameters:
        ring = find_ring(topology)
        if ring is not None and ring_links_ok(topology, tuple(reversed(ring))):
            return {"channels": 2, "ring": ring}
        return {"channels": 1, "ring": ring}
    return {}


def _lacks_links(entry: LibraryEntry, topology: Topology, params: Mapping[str, Any]) -> bool:
    """Whether the program needs links the topology lacks: build it on a fully connected copy of the
    topology (same ranks and nodes) and compare the links its copies use."""
    n = topology.num_ranks
    full = replace(topology, link_list=tuple(Link(s, d) for s in range(n) for d in range(n) if s != d), switches=())
    program = entry.builder(full, **params)
    return any(not topology.has_link(op.src.rank, op.dst.rank) for op in program.ops if op.src.rank != op.dst.rank)


def library_programs(topology: Topology, collective_name: str) -> list[tuple[str, Program]]:
    """Every library program for `collective_name` that fits the topology (shape and links), built with
    suggested parameters, in registry order. Programs whose shape does not fit, or that need a link the
    topology lacks (e.g. all-pairs on a ring), are left out."""
    key = canonical_name(collective_name)
    out = []
    for entry in _ENTRIES:
        if entry.collective != key or entry.fits(topology.num_ranks, topology.num_machines) is not None:
            continue
        if entry.multi_node and topology.machines is None:
            continue
        params = suggested_parameters(entry, topology)
        try:
            program = entry.builder(topology, **params)
        except AlgorithmError:
            continue
        except ProgramError:
            if _lacks_links(entry, topology, params):
                continue
            raise
        out.append((entry.name, program))
    return out
