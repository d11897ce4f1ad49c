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


_HELD = frozenset({signal.SIGINT, signal.SIGTERM})


class _HeldSignalsProcess(multiprocessing.context.SpawnProcess):
    """A spawned worker whose start holds SIGINT/SIGTERM: a signal that lands while the parent writes the
    worker's start-up data would cut it short, and the half-started worker would print an EOFError traceback.
    The held signal is delivered to the parent right after; the worker inherits the block until `_start_worker`."""

    def start(self) -> None:
        old = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        try:
            super().start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


class _HeldSignalsContext(multiprocessing.context.SpawnContext):
    Process = _HeldSignalsProcess  # type: ignore[assignment]


def _start_worker(initializer: Callable[[], None]) -> None:
    initializer()  # e.g. ignore SIGINT: the parent decides what to keep and stops the workers
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)


def make_pool(jobs: int, initializer: Callable[[], None] = worker_init) -> ProcessPoolExecutor:
    """Spawned workers (z3 and forked threads do not mix), started with `initializer`."""
    return ProcessPoolExecutor(max_workers=jobs, mp_context=_HeldSignalsContext(),
                               initializer=_start_worker, initargs=(initializer,))


def stop_pool(pool: ProcessPoolExecutor) -> None:
    """Cancel queued work and end running workers now (a solver call may otherwise run to its time limit)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API for this before 3.14
    for process in processes:  # first: a worker that sees its queue close before it ends prints a traceback
        if process.is_alive():
            process.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.join(timeout=5)

