"""All-pairs programs: every rank talks to every other rank directly (needs a fully connected topology).

- one-phase AllReduce: every rank receives every other rank's whole buffer into scratch and reduces
  locally (one network step, n-1 buffers per rank on the wire: for small sizes);
- two-phase AllReduce: rank r gathers share r of every rank into scratch and reduces it locally
  (all-pairs ReduceScatter), then sends its reduced share to everyone (all-pairs AllGather);
- AllToAll: each rank sends each peer its block directly.
Peers are visited in the staggered order r+1, r+2, ... so that no rank is everyone's first target.
The MSCCL runtime runs at most 32 threadblocks per channel on a GPU (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL
in msccl_struct.h), and each peer needs its own threadblock, so with many ranks the peers are spread
over channels: a transfer from r to r+k (k in 1..n-1) uses channel (k-1) // PEERS_PER_CHANNEL.
"""

from __future__ import annotations

from collsynth.algorithms._common import INPUT, OUTPUT, check_common, new_builder, pieces
from collsynth.collectives.spec import make_collective
from collsynth.language.program import Program
from collsynth.topologies.model import Topology

# Distances per channel: a rank's send and receive threadblocks for 14 distances (28) stay below the
# runtime's 32 per channel, with room for the threadblocks of local copies and reductions.
PEERS_PER_CHANNEL = 14


def _peers(rank: int, n: int) -> list[int]:
    return [(rank + k) % n for k in range(1, n)]


def _channel(src: int, dst: int, n: int) -> int:
    """The channel of the transfer src -> dst, by the distance (dst - src) mod n: on each channel a rank
    sends to at most PEERS_PER_CHANNEL peers and receives from as many."""
    return ((dst - src) % n - 1) // PEERS_PER_CHANNEL


def allpairs_allreduce_one_phase(topology: Topology, *, chunks: int = 1, instances: int = 1,
                                 protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllReduce in one exchange: each rank copies its whole input (n*chunks chunks) to every peer's scratch,
    then sums the n-1 received buffers into its own."""
    name = "allpairs_allreduce_one_phase"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    n = topology.num_ranks
    total = n * chunks
    coll = make_collective("allreduce", n, chunks, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    scratch = "allpairs_recv"
    for dst in range(n):
        for slot, src in enumerate(_peers(dst, n)):
            for start, count in pieces(0, total):
                b.chunk(src, INPUT, start, count).copy(dst, scratch, slot * total + start, ch=_channel(src, dst, n))
    for rank in range(n):
        for start, count in pieces(0, total):
            if inplace:
                acc = b.chunk(rank, INPUT, start, count)
            else:
                acc = b.chunk(rank, INPUT, start, count).copy(rank, OUTPUT, start)
            for slot in range(n - 1):
                acc = acc.reduce(b.chunk(rank, scratch, slot * total + start, count))
    return b.build()


def allpairs_allreduce_two_phase(topology: Topology, *, chunks: int = 1, instances: int = 1,
                                 protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllReduce as all-pairs ReduceScatter then all-pairs AllGather; rank r owns chunks
    [r*chunks, (r+1)*chunks)."""
    name = "allpairs_allreduce_two_phase"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    n = topology.num_ranks
    coll = make_collective("allreduce", n, chunks, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    scratch = "allpairs_share"
    for owner in range(n):
        for slot, src in enumerate(_peers(owner, n)):
            b.chunk(src, INPUT, owner * chunks, chunks).copy(owner, scratch, slot * chunks, ch=_channel(src, owner, n))
    for owner in range(n):
        acc = b.chunk(owner, INPUT, owner * chunks, chunks)
        for slot in range(n - 1):
            acc = acc.reduce(b.chunk(owner, scratch, slot * chunks, chunks))
    for owner in range(n):
        share = b.chunk(owner, INPUT, owner * chunks, chunks)
        if not inplace:
            share.copy(owner, OUTPUT, owner * chunks)
        for dst in _peers(owner, n):
            share.copy(dst, OUTPUT, owner * chunks, ch=_channel(owner, dst, n))
    return b.build()


def allpairs_alltoall(topology: Topology, *, chunks: int = 1, instances: int = 1, protocol: str = "Simple",
                      inplace: bool = False) -> Program:
    """AllToAll with one direct copy per (sender, receiver) pair. In place, the blocks are staged in the
    receiver's scratch first (a receiver's slot still holds data it must send)."""
    name = "allpairs_alltoall"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    n = topology.num_ranks
    coll = make_collective("alltoall", n, chunks, inplace=inplace)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    staging = "alltoall_stage"
    for src in range(n):
        for dst in [src] + _peers(src, n):
            block = b.chunk(src, INPUT, dst * chunks, chunks)
            if not inplace:
                block.copy(dst, OUTPUT, src * chunks, ch=_channel(src, dst, n))
            elif dst != src:
                block.copy(dst, staging, src * chunks, ch=_channel(src, dst, n))
    if inplace:
        for dst in range(n):
            for src in _peers(dst, n):
                b.chunk(dst, staging, src * chunks, chunks).copy(dst, OUTPUT, src * chunks)
    return b.build()
