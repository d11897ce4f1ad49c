"""Worker processes for the Pareto sweep: spawn-safe top-level functions, plain data across the boundary."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any


def worker_init() -> None:
    """Workers ignore Ctrl-C: the parent decides what to keep and stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_pool(jobs: int, initializer: Callable[[], None] = worker_init) -> ProcessPoolExecutor:
    """Spawned workers (z3 and forked threads do not mix), started with `initializer`."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"),
                               initializer=initializer)


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel queued work and end running workers now (a solver call may otherwise run to its time limit)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API for this before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=5)


def explore_chunks_task(payload: dict[str, Any]) -> dict[str, Any]:
    """Run `pareto.explore_chunks` from plain data (see `pareto._task_payload`); returns plain data."""
    from collsynth.synth.pareto import explore_chunks_from_payload

    return explore_chunks_from_payload(payload, interruptible=False)
