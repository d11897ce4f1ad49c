"""Worker processes for the Pareto sweep: spawn-safe top-level functions; frozen dataclasses (which pickle as
they are) across the boundary."""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor


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

