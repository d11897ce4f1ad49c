"""Worker pools that a signal cannot catch half-started (`SafeStartPool`, `stop_pool`; the hazards are described in
collsynth.core.signals, which re-exports both names). Kept apart so that importing collsynth.core.signals, as
every command's entry does, does not import multiprocessing."""

from __future__ import annotations

import functools
import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from collsynth.core.signals_held import interrupts_held


def _start_worker(initializer: Callable[[], None] | None) -> None:
    """A pool worker's first act: ignore Ctrl-C (the parent decides), run `initializer`, then unblock SIGINT
    (a Ctrl-C that arrived during start-up is dropped with it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if initializer is not None:
        initializer()
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


class SafeStartPool(ProcessPoolExecutor):
    """A pool of spawned workers that ignore Ctrl-C and that no signal catches half-started (module docstring).
    Workers are started only inside `submit` (spawned pools start them on demand), so holding signals there
    covers every start."""

    def __init__(self, workers: int, initializer: Callable[[], None] | None = None) -> None:
        # The pool's queues make named semaphores: each is registered with the resource tracker and then given the
        # finalizer that unlinks it at exit. A signal between the two leaked one ("leaked semaphore objects" at
        # exit, seen after a SIGTERM at a build's start), so signals wait until the pool is made.
        with interrupts_held():
            super().__init__(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=functools.partial(_start_worker, initializer))

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        """As `ProcessPoolExecutor.submit`; a worker that cannot be started raises `BrokenProcessPool`.

        When a worker dies, the pool's manager thread closes the pool's pipes while `submit` may be spawning a
        replacement; the spawn then passes a closed (or already reused) descriptor and fails with ValueError
        ("bad value(s) in fds_to_keep") or OSError. That is the pool breaking, not the caller's error, so it is
        reported the way every other broken pool is."""
        with interrupts_held():
            try:
                return super().submit(fn, *args, **kwargs)
            except (ValueError, OSError) as error:
                raise BrokenProcessPool(f"a worker could not be started: {error}") from error


def stop_pool(pool: ProcessPoolExecutor, grace_s: float = 5.0) -> None:
    """Cancel queued work and end the workers now (a solver call may otherwise run to its time limit): SIGTERM,
    then SIGKILL for any still alive after `grace_s`, so none outlives this call (a worker still starting
    would otherwise find the pool's semaphores gone when the parent exits); then let the pool's manager thread end.

    A worker killed halfway through sending a result (over 16 KiB: a length header, then the body) leaves the
    manager thread reading a body that never comes, since this process holds the pipe's write end too; Python's
    exit joins that thread and would hang. With every worker gone, closing our write end ends that read (end of
    file: the pool counts as broken and its thread finishes)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API for this before 3.14
    manager = getattr(pool, "_executor_manager_thread", None)
    results = getattr(pool, "_result_queue", None)
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=grace_s)
        if process.is_alive():
            process.kill()
            process.join(timeout=grace_s)
    if results is not None and not any(process.is_alive() for process in processes):
        results._writer.close()  # the pool's own end; only workers write results
    if manager is not None:
        manager.join(timeout=grace_s)
