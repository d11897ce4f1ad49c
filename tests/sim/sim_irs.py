"""Hand-built MSCCL-IR programs for the simulator and Chakra tests (no compiler needed)."""

from __future__ import annotations

from collsynth.ir import Algo, Gpu, Step, Threadblock


def ring_allreduce_ir(n: int, *, proto: str = "Simple", name: str | None = None) -> Algo:
    """In-place ring AllReduce, one threadblock per rank (send to r+1, receive from r-1), n chunks.

    Rank r: send chunk r-1; n-2 x rrs; rrcs of its own chunk r; n-2 x rcs; a final r: 2n-1 steps."""
    gpus = []
    for r in range(n):
        steps = [Step(0, "s", "i", (r - 1) % n, "i", (r - 1) % n, 1)]
        for k in range(1, n - 1):
            c = (r - 1 - k) % n
            steps.append(Step(len(steps), "rrs", "i", c, "i", c, 1))
        steps.append(Step(len(steps), "rrcs", "i", r, "i", r, 1))
        for j in range(1, n - 1):
            c = (r - j) % n
            steps.append(Step(len(steps), "rcs", "i", c, "i", c, 1))
        steps.append(Step(len(steps), "r", "i", (r + 1) % n, "i", (r + 1) % n, 1))
        tb = Threadblock(0, (r + 1) % n, (r - 1) % n, 0, tuple(steps))
        gpus.append(Gpu(r, n, n, 0, (tb,)))
    return Algo(name or f"ring_allreduce_{n}", "allreduce", proto, 1, n, n, True, tuple(gpus))


def send_recv_ir(*, cnt: int = 1, nchunks: int = 1, channels: int = 1, name: str = "sendrecv") -> Algo:
    """Rank 0 sends `cnt` chunks to rank 1 on each of `channels` channels (one threadblock per channel)."""
    send_tbs = tuple(Threadblock(ch, 1, -1, ch, (Step(0, "s", "i", 0, "o", 0, cnt),)) for ch in range(channels))
    recv_tbs = tuple(Threadblock(ch, -1, 0, ch, (Step(0, "r", "i", 0, "o", 0, cnt),)) for ch in range(channels))
    gpus = (Gpu(0, nchunks, nchunks, 0, send_tbs), Gpu(1, nchunks, nchunks, 0, recv_tbs))
    return Algo(name, "custom", "Simple", channels, nchunks, 2, False, gpus)


def local_ops_ir() -> Algo:
    """One rank: cpy, then re after it (through a dependency on the other threadblock)."""
    tb0 = Threadblock(0, -1, -1, 0, (Step(0, "cpy", "i", 0, "o", 0, 1, hasdep=True),))
    tb1 = Threadblock(1, -1, -1, 0, (Step(0, "re", "i", 0, "o", 0, 1, depid=0, deps=0),))
    return Algo("local_ops", "custom", "Simple", 1, 1, 1, False, (Gpu(0, 1, 1, 0, (tb0, tb1)),))


def chain_broadcast_ir(n: int, *, proto: str = "Simple") -> Algo:
    """Broadcast from rank 0 down the chain 0 -> 1 -> ... -> n-1 (s, rcs..., r), one chunk."""
    gpus = [Gpu(0, 1, 1, 0, (Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "o", 0, 1),)),))]
    for r in range(1, n - 1):
        gpus.append(Gpu(r, 1, 1, 0, (Threadblock(0, r + 1, r - 1, 0, (Step(0, "rcs", "i", 0, "o", 0, 1),)),)))
    gpus.append(Gpu(n - 1, 1, 1, 0, (Threadblock(0, -1, n - 2, 0, (Step(0, "r", "i", 0, "o", 0, 1),)),)))
    return Algo(f"chain_broadcast_{n}", "broadcast", proto, 1, 1, n, False, tuple(gpus))


def fan_in_ir() -> Algo:
    """Ranks 0 and 1 each send one chunk to rank 2 (two flows into one rank)."""
    gpus = (
        Gpu(0, 1, 1, 0, (Threadblock(0, 2, -1, 0, (Step(0, "s", "i", 0, "o", 0, 1),)),)),
        Gpu(1, 1, 1, 0, (Threadblock(0, 2, -1, 0, (Step(0, "s", "i", 0, "o", 0, 1),)),)),
        Gpu(2, 1, 1, 0, (Threadblock(0, -1, 0, 0, (Step(0, "r", "i", 0, "o", 0, 1),)),
                         Threadblock(1, -1, 1, 0, (Step(0, "r", "i", 0, "o", 0, 1),)))),
    )
    return Algo("fan_in", "custom", "Simple", 1, 1, 3, False, gpus)


def deadlock_ir() -> Algo:
    """Two ranks that both receive before they send: nothing can ever start."""
    gpus = tuple(Gpu(r, 1, 1, 0, (Threadblock(0, 1 - r, 1 - r, 0, (Step(0, "r", "i", 0, "o", 0, 1),
                                                                   Step(1, "s", "i", 0, "o", 0, 1))),))
                 for r in range(2))
    return Algo("deadlock", "custom", "Simple", 1, 1, 2, False, gpus)


def every_step_type_ir() -> Algo:
    """Three ranks in a line 0 -> 1 -> 2 exercising s, r, rcs, rrs, rrc, rrcs, cpy, re and nop."""
    g0 = Gpu(0, 4, 4, 0, (Threadblock(0, 1, -1, 0, (
        Step(0, "s", "i", 0, "i", 0, 1),
        Step(1, "s", "i", 1, "i", 1, 1),
        Step(2, "s", "i", 2, "i", 2, 2),
        Step(3, "s", "i", 0, "i", 0, 1),
    )),))
    g1 = Gpu(1, 4, 4, 1, (
        Threadblock(0, 2, 0, 0, (
            Step(0, "rcs", "i", 0, "s", 0, 1),
            Step(1, "rrs", "i", 1, "i", 1, 1),
            Step(2, "rrcs", "i", 2, "o", 2, 2, hasdep=True),
            Step(3, "rrc", "i", 0, "o", 0, 1, hasdep=True),
        )),
        Threadblock(1, -1, -1, 0, (
            Step(0, "nop", "i", 0, "i", 0, 0, depid=0, deps=2),
            Step(1, "cpy", "o", 2, "s", 0, 1, depid=0, deps=3),
            Step(2, "re", "s", 0, "o", 1, 1),
        )),
    ))
    g2 = Gpu(2, 4, 4, 0, (Threadblock(0, -1, 1, 0, (
        Step(0, "r", "i", 0, "o", 0, 1),
        Step(1, "rrc", "i", 1, "o", 1, 1),
        Step(2, "r", "i", 2, "o", 2, 2),
    )),))
    return Algo("every_step", "custom", "Simple", 1, 4, 3, False, (g0, g1, g2))
