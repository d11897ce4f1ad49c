"""Ring AllGather, ReduceScatter and AllReduce, with several channels.

Channel k carries chunk k of every rank's share and walks the ring forwards when k is even and
backwards when k is odd (when the topology has the links both ways), so that two channels keep both
directions of every ring link busy. Reductions accumulate in the input buffer of the rank they pass,
as MSCCLang's ring programs do; results land in the output buffer.
"""

from __future__ import annotations

from collections.abc import Sequence

from collsynth.algorithms._common import INPUT, OUTPUT, check_common, new_builder, resolve_ring, ring_links_ok
from collsynth.collectives.spec import make_collective
from collsynth.language.program import Program
from collsynth.topologies.model import Topology


def _channel_orders(name: str, topology: Topology, ring: Sequence[int] | None,
                    channels: int) -> list[tuple[int, ...]]:
    """The ring order each channel walks: alternate directions when every ring link exists both ways."""
    order = resolve_ring(name, topology, ring, both_ways=False)
    backwards = tuple(reversed(order))
    two_way = channels > 1 and ring_links_ok(topology, backwards)
    return [backwards if two_way and k % 2 else order for k in range(channels)]


def ring_allgather(topology: Topology, *, channels: int = 1, instances: int = 1, protocol: str = "Simple",
                   inplace: bool = False, ring: Sequence[int] | None = None) -> Program:
    """AllGather around a ring: each rank's chunk k travels n-1 hops on channel k (chunk factor = channels)."""
    name = "ring_allgather"
    check_common(name, topology, instances=instances, protocol=protocol, channels=channels)
    n = topology.num_ranks
    coll = make_collective("allgather", n, channels, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    for ch, order in enumerate(_channel_orders(name, topology, ring, channels)):
        for pos, rank in enumerate(order):
            index = rank * channels + ch
            ref = b.chunk(rank, INPUT, ch, 1)
            if not inplace:
                ref.copy(rank, OUTPUT, index)
            for hop in range(1, n):
                ref = ref.copy(order[(pos + hop) % n], OUTPUT, index, ch=ch)
    return b.build()


def ring_reducescatter(topology: Topology, *, channels: int = 1, instances: int = 1, protocol: str = "Simple",
                       inplace: bool = False, ring: Sequence[int] | None = None) -> Program:
    """ReduceScatter around a ring: the share of rank r starts at the rank after r and is reduced hop by
    hop until it reaches r (chunk factor = channels)."""
    name = "ring_reducescatter"
    check_common(name, topology, instances=instances, protocol=protocol, channels=channels)
    n = topology.num_ranks
    coll = make_collective("reducescatter", n, channels, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    for ch, order in enumerate(_channel_orders(name, topology, ring, channels)):
        for pos, owner in enumerate(order):
            index = owner * channels + ch
            acc = b.chunk(order[(pos + 1) % n], INPUT, index, 1)
            for hop in range(2, n):
                acc = b.chunk(order[(pos + hop) % n], INPUT, index, 1).reduce(acc, ch=ch)
            if not inplace:  # the owner's own addend goes to its output first; the last hop reduces into it
                b.chunk(owner, INPUT, index, 1).copy(owner, OUTPUT, ch)
            b.chunk(owner, OUTPUT, ch, 1).reduce(acc, ch=ch)
    return b.build()


def ring_allreduce(topology: Topology, *, channels: int = 1, instances: int = 1, protocol: str = "Simple",
                   inplace: bool = False, ring: Sequence[int] | None = None) -> Program:
    """AllReduce as a ring ReduceScatter then a ring AllGather: n*channels chunks, chunk k*n+i is reduced
    onto the i-th rank of channel k's ring and then passed around it."""
    name = "ring_allreduce"
    check_common(name, topology, instances=instances, protocol=protocol, channels=channels)
    n = topology.num_ranks
    coll = make_collective("allreduce", n, channels, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    for ch, order in enumerate(_channel_orders(name, topology, ring, channels)):
        for pos, owner in enumerate(order):
            index = ch * n + pos
            acc = b.chunk(order[(pos + 1) % n], INPUT, index, 1)
            for hop in range(2, n + 1):  # hop n lands on the owner
                acc = b.chunk(order[(pos + hop) % n], INPUT, index, 1).reduce(acc, ch=ch)
            if not inplace:
                acc.copy(owner, OUTPUT, index)
            for hop in range(1, n):
                acc = acc.copy(order[(pos + hop) % n], OUTPUT, index, ch=ch)
    return b.build()
