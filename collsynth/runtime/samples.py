"""Hand-built reference IRs for tests and benchmarks of the backends (no compiler involved).

Each function writes the MSCCL-IR of one textbook algorithm directly, step by step:
ring AllGather, ring AllReduce (fused rrs/rrcs/rcs, or unfused with rrc + s), an AllReduce that reduces
into scratch with local `re`/`cpy`/`nop` steps and cross-threadblock dependencies, and a pairwise AllToAll.
"""

from __future__ import annotations

from collsynth.core.errors import CollsynthError
from collsynth.ir import (
    COPY,
    NOP,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
    Algo,
    Gpu,
    Step,
    Threadblock,
)


def _need_ranks(n: int, least: int = 2) -> None:
    if n < least:
        raise CollsynthError(f"this sample needs at least {least} ranks, got {n}")


def _steps(*specs: tuple) -> tuple[Step, ...]:
    """Steps from (type, srcbuf, srcoff, dstbuf, dstoff[, cnt, depid, deps, hasdep]) tuples, numbered in order."""
    steps = []
    for index, spec in enumerate(specs):
        kind, srcbuf, srcoff, dstbuf, dstoff, *rest = spec
        cnt, depid, deps, hasdep = (list(rest) + [1, -1, -1, False][len(rest):])
        steps.append(Step(index, kind, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep))
    return tuple(steps)


def ring_allgather(n: int, *, inplace: bool = False) -> Algo:
    """Ring AllGather, one chunk per rank: rank r copies its input to output[r], sends it on, forwards
    n-2 chunks (rcs) and receives the last (r). In place, the input is output[r] itself."""
    _need_ranks(n)
    gpus = []
    for r in range(n):
        own = ("o", r) if inplace else ("i", 0)
        specs: list[tuple] = [] if inplace else [(COPY, "i", 0, "o", r)]
        specs.append((SEND, *own, "o", r))
        specs += [(RECV_COPY_SEND, "o", (r - k) % n, "o", (r - k) % n) for k in range(1, n - 1)]
        specs.append((RECV, "o", (r + 1) % n, "o", (r + 1) % n))
        tb = Threadblock(0, (r + 1) % n, (r - 1) % n, 0, _steps(*specs))
        gpus.append(Gpu(r, 1, n, 0, (tb,)))
    return Algo(f"ring_allgather_{n}", "allgather", "Simple", 1, n, n, inplace, tuple(gpus))


def ring_allreduce(n: int, *, channels: int = 1, inplace: bool = False, fused: bool = True) -> Algo:
    """Ring AllReduce on n*channels chunks (MSCCLang layout: chunk c of every rank is summed).

    Channel ch handles chunks ch*n .. ch*n+n-1 on its own ring. Reduce-scatter: s, n-2 rrs, then the
    owner's rrcs (fused) or rrc + s (unfused); all-gather: n-2 rcs and a final r. In place, every step
    addresses the input buffer, which is also the output (o_chunks=0, as MSCCL writes it)."""
    _need_ranks(n)
    out = "i" if inplace else "o"
    chunks = n * channels
    gpus = []
    for r in range(n):
        tbs = []
        for ch in range(channels):
            def c(index: int, ch: int = ch) -> int:
                return ch * n + index % n

            specs: list[tuple] = [(SEND, "i", c(r - 1), "i", c(r - 1))]
            specs += [(RECV_REDUCE_SEND, "i", c(r - 1 - k), "i", c(r - 1 - k)) for k in range(1, n - 1)]
            if fused:
                specs.append((RECV_REDUCE_COPY_SEND, "i", c(r), out, c(r)))
            else:
                specs += [(RECV_REDUCE_COPY, "i", c(r), out, c(r)), (SEND, out, c(r), out, c(r))]
            specs += [(RECV_COPY_SEND, out, c(r - k), out, c(r - k)) for k in range(1, n - 1)]
            specs.append((RECV, out, c(r + 1), out, c(r + 1)))
            tbs.append(Threadblock(ch, (r + 1) % n, (r - 1) % n, ch, _steps(*specs)))
        gpus.append(Gpu(r, chunks, 0 if inplace else chunks, 0, tuple(tbs)))
    name = f"ring_allreduce_{n}x{channels}{'_unfused' if not fused else ''}"
    return Algo(name, "allreduce", "Simple", channels, chunks, n, inplace, tuple(gpus))


def allreduce_via_scratch(n: int) -> Algo:
    """AllReduce on n chunks where each rank owns chunk r: every peer's contribution to chunk r lands in
    scratch (tb per peer: s, r), a local threadblock copies input[r] to output[r] and adds the scratch
    slots with `re` (first dependencies on `nop`s), then each peer threadblock sends the result (s,
    waiting on the last `re`) and receives the peer's result (r)."""
    _need_ranks(n)
    gpus = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        reducer = len(peers)  # tb id of the local reducing threadblock
        last_re = 2 * len(peers) - 1  # its last step: cpy, len(peers)-1 nops, len(peers) re
        tbs = []
        for slot, p in enumerate(peers):
            tbs.append(Threadblock(slot, p, p, 0, _steps(
                (SEND, "i", p, "s", r if r < p else r - 1),  # dst: r's slot in p's scratch
                (RECV, "i", r, "s", slot, 1, -1, -1, True),
                (SEND, "o", r, "o", r, 1, reducer, last_re, False),
                (RECV, "o", p, "o", p),
            )))
        specs: list[tuple] = [(COPY, "i", r, "o", r)]
        specs += [(NOP, "i", -1, "o", -1, 0, slot, 1, False) for slot in range(len(peers) - 1)]
        for slot in range(len(peers)):
            dep = (len(peers) - 1, 1) if slot == 0 else (-1, -1)
            first = (len(peers) - 1 + slot) % len(peers)  # the re with the dependency adds the last peer first
            specs.append((REDUCE, "s", first, "o", r, 1, *dep, slot == len(peers) - 1))
        tbs.append(Threadblock(reducer, -1, -1, 0, _steps(*specs)))
        gpus.append(Gpu(r, n, n, len(peers), tuple(tbs)))
    return Algo(f"allreduce_via_scratch_{n}", "allreduce", "Simple", 1, n, n, False, tuple(gpus))


def pairwise_alltoall(n: int) -> Algo:
    """AllToAll, one chunk per pair: a threadblock per peer sends input[peer] and receives output[peer];
    a local threadblock copies input[r] to output[r]."""
    _need_ranks(n)
    gpus = []
    for r in range(n):
        peers = [p for p in range(n) if p != r]
        tbs = [Threadblock(t, p, p, 0, _steps((SEND, "i", p, "o", r), (RECV, "i", r, "o", p)))
               for t, p in enumerate(peers)]
        tbs.append(Threadblock(len(peers), -1, -1, 0, _steps((COPY, "i", r, "o", r))))
        gpus.append(Gpu(r, n, n, 0, tuple(tbs)))
    return Algo(f"pairwise_alltoall_{n}", "alltoall", "Simple", 1, n, n, False, tuple(gpus))
