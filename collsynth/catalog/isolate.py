"""Running work in fresh, disposable processes.

z3's answers depend on everything the process solved before (its global context carries state from call
to call), so the same synthesis request can give a different schedule - with a different simulated time -
depending on which items a worker ran first. Synthesis therefore runs in a process of its own, which makes
a catalog entry a function of its work item alone. Helpers here also start and stop the builder's worker
pools: workers ignore Ctrl-C (the parent decides) and die with their parent (Linux parent-death signal).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from collsynth.synth.parallel import make_pool, stop_pool

T = TypeVar("T")


def init_worker() -> None:
    """Process initializer: ignore SIGINT (the parent handles Ctrl-C) and get SIGTERM when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: workers still end when their task queue closes


def new_pool(workers: int) -> ProcessPoolExecutor:
    return make_pool(workers, initializer=init_worker)


def run_in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a new spawned process; its exception is re-raised here. Interrupting the caller
    (Ctrl-C, an item time limit) ends the process."""
    pool = new_pool(1)
    try:
        result = pool.submit(fn, *args).result()
    except BaseException:
        stop_pool(pool)
        raise
    pool.shutdown(wait=True)
    return result
