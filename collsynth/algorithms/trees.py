"""Tree AllReduce: binomial tree, and NCCL-style double binary tree.

Both reduce up to a root (children reduce into their parent's input buffer, deepest first) and then
broadcast the result down into every output buffer. The buffer is cut into segments that travel the
tree independently, so a segment is broadcast while the next is still being reduced (pipelining).

Double binary tree: tree 0 is the balanced binary tree of `binary_tree_parents` laid on ranks as
they are (its leaves are the odd ranks); tree 1 is the same tree mirrored (rank n-1-p at position p)
for even n, shifted by one for odd n, so that tree 0's leaves are tree 1's inner nodes and no more
than one rank forwards data in both trees. Each tree reduces and broadcasts half of the buffer, on
its own channel.
"""

from __future__ import annotations

from collsynth.algorithms._common import (
    INPUT,
    OUTPUT,
    AlgorithmError,
    binary_tree_parents,
    bottom_up,
    check_common,
    children_of,
    even_split,
    new_builder,
    pieces,
)
from collsynth.collectives.spec import make_collective
from collsynth.language.builder import ProgramBuilder
from collsynth.language.program import Program
from collsynth.topologies.model import Topology


def binomial_tree_parents(n: int) -> tuple[int | None, ...]:
    """Binomial tree rooted at rank 0: rank r's parent is r with its lowest set bit cleared."""
    return (None,) + tuple(r & (r - 1) for r in range(1, n))


def double_binary_trees(n: int) -> tuple[tuple[int | None, ...], tuple[int | None, ...]]:
    """The two trees as parent-by-rank tuples (None for each tree's root)."""
    positions = binary_tree_parents(n)
    rank_of = [(n - 1 - p) if n % 2 == 0 else (p + 1) % n for p in range(n)]
    second: list[int | None] = [None] * n
    for p, up in enumerate(positions):
        second[rank_of[p]] = None if up is None else rank_of[up]
    return positions, tuple(second)


def _tree_segment(b: ProgramBuilder, parents: tuple[int | None, ...], start: int, count: int, *, inplace: bool,
                  ch: int | None) -> None:
    """Reduce chunks [start, start+count) up the tree, then broadcast them down into every output."""
    order = bottom_up(parents)
    kids = children_of(parents)
    for rank in order:
        up = parents[rank]
        if up is not None:
            b.chunk(up, INPUT, start, count).reduce(b.chunk(rank, INPUT, start, count), ch=ch)
    root = order[-1]
    if not inplace:
        b.chunk(root, INPUT, start, count).copy(root, OUTPUT, start)
    for rank in reversed(order):
        src = b.chunk(rank, INPUT if rank == root else OUTPUT, start, count)
        for child in kids[rank]:
            src.copy(child, OUTPUT, start, ch=ch)


def binomial_tree_allreduce(topology: Topology, *, chunks: int = 1, segments: int = 1, instances: int = 1,
                            protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllReduce by binomial-tree reduce to rank 0 and binomial-tree broadcast, over `segments` pieces of
    the n*chunks-chunk buffer."""
    name = "binomial_tree_allreduce"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    n = topology.num_ranks
    total = n * chunks
    if not 1 <= segments <= total:
        raise AlgorithmError(f"{name}: segments must be in 1..{total} (the buffer has {total} chunks), got {segments}")
    coll = make_collective("allreduce", n, chunks, inplace=inplace)
    # Segments are contiguous: without aggregate=False the compiler would merge them back into one transfer.
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol, aggregate=False)
    parents = binomial_tree_parents(n)
    for seg_start, seg_count in even_split(total, segments):
        for start, count in pieces(seg_start, seg_count):
            _tree_segment(b, parents, start, count, inplace=inplace, ch=None)
    return b.build()


def double_binary_tree_allreduce(topology: Topology, *, chunks: int | None = None, segments: int | None = None,
                                 instances: int = 1, protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllReduce over two complementary binary trees, each carrying half of the buffer in `segments`
    pipelined segments (default: 4, or fewer when a half is smaller); tree t uses channel t. `chunks` (the
    chunk factor) defaults to 1 for an even number of ranks and 2 for an odd one, so that the buffer halves
    evenly."""
    name = "double_binary_tree_allreduce"
    n = topology.num_ranks
    chunks = (1 if n % 2 == 0 else 2) if chunks is None else chunks
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    total = n * chunks
    if total % 2:
        raise AlgorithmError(f"{name}: {n} ranks x {chunks} chunks = {total} chunks do not split in two halves; "
                             "use an even chunks")
    half = total // 2
    segments = min(4, half) if segments is None else segments
    if not 1 <= segments <= half:
        raise AlgorithmError(f"{name}: segments must be in 1..{half} (each tree carries {half} chunks), "
                             f"got {segments}")
    coll = make_collective("allreduce", n, chunks, inplace=inplace)
    # Segments are contiguous: without aggregate=False the compiler would merge them back into one transfer.
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol, aggregate=False)
    trees = double_binary_trees(n)
    for seg_start, seg_count in even_split(half, segments):
        for tree, parents in enumerate(trees):
            for start, count in pieces(tree * half + seg_start, seg_count):
                _tree_segment(b, parents, start, count, inplace=inplace, ch=tree)
    return b.build()
