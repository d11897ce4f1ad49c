"""Worker processes for the Pareto sweep: spawn-safe top-level functions; frozen dataclasses (which pickle as
they are) across the boundary."""

from __future__ import annotations

import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from collsynth.core.signals import SafeStartPool, stop_pool

__all__ = ["make_pool", "stop_pool", "worker_init"]


def worker_init() -> None:
    """Workers ignore Ctrl-C: the parent decides what to keep and stops them."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def make_pool(jobs: int, initializer: Callable[[], None] = worker_init) -> ProcessPoolExecutor:
    """Spawned workers (z3 and forked threads do not mix), started with `initializer`; a signal never catches
    one half-started (collsynth.core.signals.SafeStartPool). `stop_pool` ends them at once."""
    return SafeStartPool(jobs, initializer=initializer)
