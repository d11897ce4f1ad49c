"""The phase plans of the hierarchical composition: which small collective each phase runs, on which
groups (every node, or every rail = the GPUs of one index across nodes), and which global chunks one
phase chunk stands for.

GPU (m, g) is `groups[m][g]`; N nodes of G GPUs; C chunks per buffer slot; n = N*G.
- AllReduce (2PH): node ReduceScatter of G blocks (block g = N*C contiguous chunks, summed onto GPU g of
  every node), rail AllReduce of block g cut into N sub-blocks, node AllGather of the blocks.
- AllGather: rail AllGather of each GPU's own chunks, then node AllGather of what each rail gathered.
- ReduceScatter: the mirror: node ReduceScatter of the chunks owned by rail g, then rail ReduceScatter.
- AllToAll, node first (MSCCL++/NCCL's two-step AllToAll, PXN-like): GPU (m, g') hands GPU (m, g) what it
  sends to rail g, then rails exchange; rail first: the rails exchange what goes to each node, then nodes
  deliver.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collsynth.collectives import Collective, make_collective

Groups = Sequence[Sequence[int]]


@dataclass(frozen=True)
class Phase:
    level: str  # "node" (a group per node) or "rail" (a group per GPU index)
    collective: Collective  # the phase's own collective on the group's ranks
    chunks_of: Callable[[int, int], tuple[int, ...]]  # (group index, phase chunk) -> global chunks


def _rank_chunks(rank: int, c: int) -> tuple[int, ...]:
    return tuple(range(rank * c, (rank + 1) * c))


def allreduce_plan(groups: Groups, c: int) -> tuple[Phase, ...]:
    nodes, gpus = len(groups), len(groups[0])
    span = nodes * c

    def block(group: int, g: int) -> tuple[int, ...]:
        return tuple(range(g * span, (g + 1) * span))

    def sub_block(g: int, m: int) -> tuple[int, ...]:
        return tuple(range(g * span + m * c, g * span + (m + 1) * c))

    return (Phase("node", make_collective("reducescatter", gpus, 1), block),
            Phase("rail", make_collective("allreduce", nodes, 1), sub_block),
            Phase("node", make_collective("allgather", gpus, 1), block))


def allgather_plan(groups: Groups, c: int) -> tuple[Phase, ...]:
    nodes, gpus = len(groups), len(groups[0])

    def own(g: int, m: int) -> tuple[int, ...]:
        return _rank_chunks(groups[m][g], c)

    def rail_of(m: int, g: int) -> tuple[int, ...]:
        return tuple(x for other in range(nodes) for x in _rank_chunks(groups[other][g], c))

    return (Phase("rail", make_collective("allgather", nodes, 1), own),
            Phase("node", make_collective("allgather", gpus, 1), rail_of))


def reducescatter_plan(groups: Groups, c: int) -> tuple[Phase, ...]:
    first, second = allgather_plan(groups, c)
    return (Phase("node", make_collective("reducescatter", len(groups[0]), 1), second.chunks_of),
            Phase("rail", make_collective("reducescatter", len(groups), 1), first.chunks_of))


def _pair_chunks(sources: Sequence[int], dests: Sequence[int], n: int, c: int) -> tuple[int, ...]:
    return tuple((s * n + d) * c + i for s in sources for d in dests for i in range(c))


def alltoall_plan(groups: Groups, c: int, *, rail_first: bool = False) -> tuple[Phase, ...]:
    nodes, gpus = len(groups), len(groups[0])
    n = nodes * gpus

    def node(m: int) -> list[int]:
        return list(groups[m])

    def rail(g: int) -> list[int]:
        return [groups[m][g] for m in range(nodes)]

    if rail_first:
        def across(g: int, p: int) -> tuple[int, ...]:  # (m, g) -> every GPU of node m'
            m, m2 = divmod(p, nodes)
            return _pair_chunks([groups[m][g]], node(m2), n, c)

        def within(m: int, p: int) -> tuple[int, ...]:  # rail g' -> (m, g)
            g1, g = divmod(p, gpus)
            return _pair_chunks(rail(g1), [groups[m][g]], n, c)

        return (Phase("rail", make_collective("alltoall", nodes, 1), across),
                Phase("node", make_collective("alltoall", gpus, 1), within))

    def gather(m: int, p: int) -> tuple[int, ...]:  # (m, g') -> every GPU of rail g
        g1, g = divmod(p, gpus)
        return _pair_chunks([groups[m][g1]], rail(g), n, c)

    def exchange(g: int, p: int) -> tuple[int, ...]:  # every GPU of node m -> (m', g)
        m, m2 = divmod(p, nodes)
        return _pair_chunks(node(m), [groups[m2][g]], n, c)

    return (Phase("node", make_collective("alltoall", gpus, 1), gather),
            Phase("rail", make_collective("alltoall", nodes, 1), exchange))


PLANS: dict[str, dict[str, Callable[[Groups, int], tuple[Phase, ...]]]] = {
    "allreduce": {"2ph": allreduce_plan},
    "allgather": {"rail-node": allgather_plan},
    "reducescatter": {"node-rail": reducescatter_plan},
    "alltoall": {"node-rail": alltoall_plan,
                 "rail-node": lambda groups, c: alltoall_plan(groups, c, rail_first=True)},
}
