"""Hand-built IRs of the classic algorithms, for the CUDA backend's tests and benchmark.

They are written directly in the IR (not through the DSL and compiler) so that the backend can be
exercised on its own; `instances` replicates every algorithm over channels, channel `i` moving chunk
piece `i` of every rank, which multiplies the threadblocks (and the bandwidth one GPU can reach).
"""

from __future__ import annotations

from types import MappingProxyType

from collsynth.ir import (
    COPY,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
    Algo,
    Gpu,
    Step,
    Threadblock,
)


def _steps(*specs: tuple) -> tuple[Step, ...]:
    """Number the steps: each spec is (type, srcbuf, srcoff, dstbuf, dstoff[, depid, deps, hasdep])."""
    out = []
    for s, spec in enumerate(specs):
        kind, srcbuf, srcoff, dstbuf, dstoff, *dep = spec
        depid, deps, hasdep = (dep + [-1, -1, False])[:3] if dep else (-1, -1, False)
        out.append(Step(s, kind, srcbuf, srcoff, dstbuf, dstoff, 1, depid, deps, hasdep))
    return tuple(out)


def _algo(name: str, coll: str, n: int, instances: int, nchunksperloop: int, gpus: list[Gpu]) -> Algo:
    return Algo(name=name, collective=coll, proto="Simple", nchannels=instances, nchunksperloop=nchunksperloop,
                ngpus=n, inplace=False, gpus=tuple(gpus))


def ring_allgather(n: int, instances: int = 1) -> Algo:
    """Each rank copies its piece locally, then the pieces travel once around the ring (cpy, s, rcs, r)."""
    k = instances
    gpus = []
    for r in range(n):
        tbs = []
        for i in range(k):
            specs = [(COPY, "i", i, "o", r * k + i)]
            if n > 1:
                specs.append((SEND, "i", i, "o", r * k + i))
                for j in range(1, n - 1):
                    owner = (r - j) % n
                    specs.append((RECV_COPY_SEND, "o", owner * k + i, "o", owner * k + i))
                owner = (r + 1) % n
                specs.append((RECV, "o", owner * k + i, "o", owner * k + i))
            send, recv = ((r + 1) % n, (r - 1) % n) if n > 1 else (-1, -1)
            tbs.append(Threadblock(i, send, recv, i, _steps(*specs)))
        gpus.append(Gpu(r, k, n * k, 0, tuple(tbs)))
    return _algo(f"ring_allgather_{n}x{k}", "allgather", n, k, n * k, gpus)


def ring_allreduce(n: int, instances: int = 1) -> Algo:
    """Reduce-scatter then all-gather around the ring, fused as s, rrs..., rrcs, rcs..., r."""
    if n < 2:
        raise ValueError("ring_allreduce needs at least 2 ranks")
    k = instances
    gpus = []
    for r in range(n):
        tbs = []
        for i in range(k):
            def chunk(block: int, i: int = i) -> int:
                return (block % n) * k + i
            specs = [(SEND, "i", chunk(r), "i", chunk(r))]
            for j in range(1, n - 1):
                specs.append((RECV_REDUCE_SEND, "i", chunk(r - j), "i", chunk(r - j)))
            specs.append((RECV_REDUCE_COPY_SEND, "i", chunk(r + 1), "o", chunk(r + 1)))
            for j in range(1, n - 1):
                specs.append((RECV_COPY_SEND, "o", chunk(r + 1 - j), "o", chunk(r + 1 - j)))
            specs.append((RECV, "o", chunk(r + 2), "o", chunk(r + 2)))
            tbs.append(Threadblock(i, (r + 1) % n, (r - 1) % n, i, _steps(*specs)))
        gpus.append(Gpu(r, n * k, n * k, 0, tuple(tbs)))
    return _algo(f"ring_allreduce_{n}x{k}", "allreduce", n, k, n * k, gpus)


def allpairs_allreduce(n: int, instances: int = 1) -> Algo:
    """Two-phase all-pairs: every rank sends block p to rank p, which sums the n contributions (cpy, then re
    per peer, each after that peer's receive), then sends the sum of its block to every rank."""
    if n < 2:
        raise ValueError("allpairs_allreduce needs at least 2 ranks")
    k = instances
    gpus = []
    for r in range(n):
        tbs: list[Threadblock] = []
        peers = [p for p in range(n) if p != r]
        for i in range(k):
            reducer = len(tbs) + len(peers)  # id of this channel's reducing threadblock
            first_peer_tb = len(tbs)
            last_reduce = len(peers)
            for p in peers:
                tbs.append(Threadblock(len(tbs), p, p, i, _steps(
                    (SEND, "i", p * k + i, "i", p * k + i),
                    (RECV, "s", p * k + i, "s", p * k + i, -1, -1, True),
                    (SEND, "o", r * k + i, "o", r * k + i, reducer, last_reduce),
                    (RECV, "o", p * k + i, "o", p * k + i),
                )))
            specs: list[tuple] = [(COPY, "i", r * k + i, "o", r * k + i)]
            for q, p in enumerate(peers):
                last = q == len(peers) - 1
                specs.append((REDUCE, "s", p * k + i, "o", r * k + i, first_peer_tb + q, 1, last))
            tbs.append(Threadblock(len(tbs), -1, -1, i, _steps(*specs)))
        gpus.append(Gpu(r, n * k, n * k, n * k, tuple(tbs)))
    return _algo(f"allpairs_allreduce_{n}x{k}", "allreduce", n, k, n * k, gpus)


def alltoall(n: int, instances: int = 1) -> Algo:
    """All-pairs AllToAll: one threadblock per (peer, channel) sends its block and receives the peer's; a local
    threadblock per channel copies the rank's own block."""
    k = instances
    gpus = []
    for r in range(n):
        tbs: list[Threadblock] = []
        for i in range(k):
            for p in range(n):
                if p == r:
                    continue
                tbs.append(Threadblock(len(tbs), p, p, i, _steps(
                    (SEND, "i", p * k + i, "i", p * k + i),
                    (RECV, "o", p * k + i, "o", p * k + i),
                )))
            tbs.append(Threadblock(len(tbs), -1, -1, i, _steps((COPY, "i", r * k + i, "o", r * k + i))))
        gpus.append(Gpu(r, n * k, n * k, 0, tuple(tbs)))
    return _algo(f"alltoall_{n}x{k}", "alltoall", n, k, n * k, gpus)


WORKLOADS = MappingProxyType({
    "allgather_ring": ring_allgather,
    "allreduce_ring": ring_allreduce,
    "allreduce_allpairs": allpairs_allreduce,
    "alltoall": alltoall,
})
