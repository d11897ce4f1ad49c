"""Recursive doubling AllGather and recursive halving-doubling (Rabenseifner) AllReduce.

Both need a power-of-two number of ranks and run log2(n) exchange rounds; in round k rank r pairs
with r XOR d for a distance d that doubles (AllGather, AllGather half of the AllReduce) or halves
(ReduceScatter half of the AllReduce). The blocks exchanged stay contiguous, so each round is one
copy (or reduce) per rank.
"""

from __future__ import annotations

from collsynth.algorithms._common import (
    INPUT,
    OUTPUT,
    AlgorithmError,
    check_common,
    is_power_of_two,
    new_builder,
    pieces,
)
from collsynth.collectives.spec import make_collective
from collsynth.language.program import Program
from collsynth.topologies.model import Topology


def _require_power_of_two(name: str, n: int) -> None:
    if not is_power_of_two(n):
        raise AlgorithmError(f"{name}: needs a power-of-two number of ranks, got {n}; use the ring version instead")


def recursive_doubling_allgather(topology: Topology, *, chunks: int = 1, instances: int = 1,
                                 protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllGather in log2(n) rounds: in round k each rank sends the 2^k blocks it holds to rank r ^ 2^k."""
    name = "recursive_doubling_allgather"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    n = topology.num_ranks
    _require_power_of_two(name, n)
    coll = make_collective("allgather", n, chunks, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    for rank in range(n):  # round 0 sends straight from the input; the own block goes to the output beside it
        own = b.chunk(rank, INPUT, 0, chunks)
        own.copy(rank ^ 1, OUTPUT, rank * chunks)
        if not inplace:
            own.copy(rank, OUTPUT, rank * chunks)
    distance = 2
    while distance < n:
        for rank in range(n):
            first = (rank // distance) * distance  # the aligned group of `distance` ranks this rank holds
            for start, count in pieces(first * chunks, distance * chunks):
                b.chunk(rank, OUTPUT, start, count).copy(rank ^ distance, OUTPUT, start)
        distance *= 2
    return b.build()


def recursive_halving_doubling_allreduce(topology: Topology, *, chunks: int = 1, instances: int = 1,
                                         protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllReduce as recursive-halving ReduceScatter (rank r ends up owning block r, reduced) followed by
    recursive-doubling AllGather; the buffer has n*chunks chunks."""
    name = "recursive_halving_doubling_allreduce"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    n = topology.num_ranks
    _require_power_of_two(name, n)
    coll = make_collective("allreduce", n, chunks, inplace=inplace)
    # Transfers halve and double in size; batched replication keeps each instance in its own part of the
    # buffers (safe for AllReduce, whose chunks are independent), where interleaving would mix them.
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    # Reduce-scatter: each rank keeps the half of its current block range that holds its own block and
    # reduces the peer's copy of that half into it.
    distance = n // 2
    while distance >= 1:
        for rank in range(n):
            peer = rank ^ distance
            first = (rank // distance) * distance  # the `distance` blocks this rank keeps this round
            for start, count in pieces(first * chunks, distance * chunks):
                b.chunk(rank, INPUT, start, count).reduce(b.chunk(peer, INPUT, start, count))
        distance //= 2
    # All-gather: block ranges double again, now into the output buffer.
    for rank in range(n):
        own = b.chunk(rank, INPUT, rank * chunks, chunks)
        if not inplace:
            own.copy(rank, OUTPUT, rank * chunks)
        own.copy(rank ^ 1, OUTPUT, rank * chunks)
    distance = 2
    while distance < n:
        for rank in range(n):
            first = (rank // distance) * distance
            for start, count in pieces(first * chunks, distance * chunks):
                b.chunk(rank, OUTPUT, start, count).copy(rank ^ distance, OUTPUT, start)
        distance *= 2
    return b.build()
