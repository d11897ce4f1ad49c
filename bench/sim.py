"""Simulator speed (64-rank ring AllReduce at 1 GB, target < 5 s), nccl-tests sweeps, and protocol predictions.

    .venv/bin/python bench/sim.py

The IRs are built by hand here (the same shape the compiler produces for a one-channel ring AllReduce and
a direct AllToAll), so the benchmark does not depend on the compiler.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from collsynth.ir import PROTOCOLS, Algo, Gpu, Step, Threadblock
from collsynth.sim import SimModel, simulate, size_sweep
from collsynth.topologies import fully_connected, ring

GB = 1 << 30


def ring_allreduce_ir(n: int, *, proto: str = "Simple") -> Algo:
    """In-place ring AllReduce, one threadblock per rank: s, (n-2) rrs, rrcs, (n-2) rcs, r."""
    gpus = []
    for r in range(n):
        steps = [Step(0, "s", "i", (r - 1) % n, "i", (r - 1) % n, 1)]
        for k in range(1, n - 1):
            steps.append(Step(len(steps), "rrs", "i", (r - 1 - k) % n, "i", (r - 1 - k) % n, 1))
        steps.append(Step(len(steps), "rrcs", "i", r, "i", r, 1))
        for j in range(1, n - 1):
            steps.append(Step(len(steps), "rcs", "i", (r - j) % n, "i", (r - j) % n, 1))
        steps.append(Step(len(steps), "r", "i", (r + 1) % n, "i", (r + 1) % n, 1))
        gpus.append(Gpu(r, n, n, 0, (Threadblock(0, (r + 1) % n, (r - 1) % n, 0, tuple(steps)),)))
    return Algo(f"ring_allreduce_{n}_{proto}", "allreduce", proto, 1, n, n, True, tuple(gpus))


def direct_alltoall_ir(n: int) -> Algo:
    """AllToAll with one send and one receive threadblock per peer (n(n-1) connections, all at once)."""
    gpus = []
    for r in range(n):
        tbs = []
        for peer in (p for p in range(n) if p != r):
            tbs.append(Threadblock(len(tbs), peer, -1, 0, (Step(0, "s", "i", peer, "o", r, 1),)))
            tbs.append(Threadblock(len(tbs), -1, peer, 0, (Step(0, "r", "i", peer, "o", peer, 1),)))
        tbs.append(Threadblock(len(tbs), -1, -1, 0, (Step(0, "cpy", "i", r, "o", r, 1),)))
        gpus.append(Gpu(r, n, n, 0, tuple(tbs)))
    return Algo(f"direct_alltoall_{n}", "alltoall", "Simple", 1, n, n, False, tuple(gpus))


def timed(run: Callable[[], object], repeats: int) -> tuple[float, float, object]:
    times, result = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times), result


def main() -> None:
    console = Console(highlight=False, width=140)
    points = Table(title="simulate(): one size (wall seconds, best / median of 3)", title_justify="left")
    for column in ("case", "ranks", "size", "tiles", "mode", "best s", "median s", "sim time us", "busbw GB/s"):
        points.add_column(column, justify="left" if column in ("case", "mode") else "right")
    cases = [
        ("ring AllReduce Simple", ring_allreduce_ir(64), ring(64), SimModel(), GB),
        ("ring AllReduce LL", ring_allreduce_ir(64, proto="LL"), ring(64), SimModel(), GB),
        ("ring AllReduce LL", ring_allreduce_ir(64, proto="LL"), ring(64), SimModel(max_exact_tiles=1 << 20), GB),
        ("ring AllReduce LL128", ring_allreduce_ir(64, proto="LL128"), ring(64), SimModel(), GB),
        ("ring AllReduce Simple", ring_allreduce_ir(64), ring(64), SimModel(), 64 << 10),
        ("ring AllReduce LL", ring_allreduce_ir(64, proto="LL"), ring(64), SimModel(), 64 << 10),
        ("ring AllReduce LL128", ring_allreduce_ir(64, proto="LL128"), ring(64), SimModel(), 64 << 10),
        ("direct AllToAll", direct_alltoall_ir(64), fully_connected(64), SimModel(), GB),
    ]
    for label, ir, topology, model, size in cases:
        best, median, result = timed(lambda ir=ir, topology=topology, model=model, size=size:
                                     simulate(ir, topology, [size], model=model), 3)
        row = result.rows[0]
        mode = "extrapolated" if result.extrapolated[0] else "exact"
        points.add_row(label, str(ir.ngpus), _size_label(size), str(result.tiles[0]), mode, f"{best:.3f}",
                       f"{median:.3f}", f"{row.time_us:.1f}", f"{row.busbw_GBps:.2f}")
    console.print(points)

    sweeps = Table(title="simulate(): nccl-tests sweep 1KB:1GB (21 sizes; wall seconds, best of 3)",
                   title_justify="left")
    for column in ("case", "ranks", "best s", "median s", "busbw @1GB"):
        sweeps.add_column(column, justify="left" if column == "case" else "right")
    sizes = size_sweep(1 << 10, GB)
    for n in (8, 64):
        ir = ring_allreduce_ir(n)
        best, median, result = timed(lambda ir=ir, n=n: simulate(ir, ring(n), sizes), 3)
        sweeps.add_row("ring AllReduce Simple", str(n), f"{best:.3f}", f"{median:.3f}",
                       f"{result.rows[-1].busbw_GBps:.2f}")
    console.print(sweeps)

    protocols = Table(title="Predicted time (us) by protocol: 8-rank ring AllReduce on ring:8 (NVLink links)",
                      title_justify="left")
    for column in ("size", "Simple", "LL", "LL128", "fastest"):
        protocols.add_column(column, justify="left" if column == "fastest" else "right")
    sizes = [1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, GB]
    results = {proto: simulate(ring_allreduce_ir(8, proto=proto), ring(8), sizes) for proto in PROTOCOLS}
    for i, size in enumerate(sizes):
        times = {proto: result.rows[i].time_us for proto, result in results.items()}
        protocols.add_row(_size_label(size), *(f"{times[proto]:.2f}" for proto in PROTOCOLS),
                          min(times, key=times.__getitem__))
    console.print(protocols)


def _size_label(size: int) -> str:
    for unit, scale in (("GB", GB), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"


if __name__ == "__main__":
    main()
