"""CPU reference interpreter speed: `.venv/bin/python bench/interpreter.py`.

Hand-built IRs (collsynth.runtime.samples, no compiler involved). For each: the interpreter's own run
time (`ExecutionResult.seconds`) and the whole `execute` call (validation, input generation, run,
postcondition check), best of 3. Target: a 64-rank ring AllReduce on 1 MB per rank under 2 s in total.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.table import Table

from collsynth.core.units import format_size
from collsynth.runtime import execute, samples

REPEATS = 3
TARGET_SECONDS = 2.0


def cases() -> list[tuple[str, object, int]]:
    mb = 1 << 20
    return [
        ("ring AllReduce", samples.ring_allreduce(8), mb),
        ("ring AllReduce", samples.ring_allreduce(16), mb),
        ("ring AllReduce", samples.ring_allreduce(32), mb),
        ("ring AllReduce", samples.ring_allreduce(64), mb),
        ("ring AllReduce, 4 channels", samples.ring_allreduce(64, channels=4), mb),
        ("ring AllGather (1 MB output)", samples.ring_allgather(64), 16 << 10),
        ("pairwise AllToAll", samples.pairwise_alltoall(64), mb),
        ("AllReduce via scratch (re/nop)", samples.allreduce_via_scratch(16), mb),
    ]


def main() -> None:
    table = Table(title="CPU reference interpreter (best of 3; float32)")
    for column in ("program", "ranks", "size/rank", "steps", "run (s)", "execute (s)", "verdict"):
        table.add_column(column, justify="left" if column in ("program", "verdict") else "right")
    target_total = None
    for name, ir, nbytes in cases():
        best_run, best_total, result = float("inf"), float("inf"), None
        for _ in range(REPEATS):
            started = time.perf_counter()
            result = execute(ir, nbytes=nbytes)
            best_total = min(best_total, time.perf_counter() - started)
            best_run = min(best_run, result.seconds)
        table.add_row(name, str(ir.ngpus), format_size(nbytes), str(result.steps_run), f"{best_run:.3f}",
                      f"{best_total:.3f}", "PASS" if result.passed else f"FAIL {result.failure}")
        if name == "ring AllReduce" and ir.ngpus == 64:
            target_total = best_total
    console = Console(width=120)
    console.print(table)
    verdict = "met" if target_total is not None and target_total < TARGET_SECONDS else "MISSED"
    console.print(f"64-rank ring AllReduce, 1MB: {target_total:.3f} s (target < {TARGET_SECONDS} s: {verdict})")


if __name__ == "__main__":
    main()
