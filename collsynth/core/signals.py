"""Signals: SIGTERM handled like Ctrl-C, and worker pools that a signal cannot catch half-started.

`terminate_as_interrupt()` makes a SIGTERM raise KeyboardInterrupt in the main thread, so every command's Ctrl-C
path (keep finished work, write what is done, exit 130) also runs when a scheduler or `kill` stops it; and an
interrupt that lands in a finalizer, where Python would drop it with an "Exception ignored" traceback, is
delivered again. The previous handler and hook come back when the block ends.

Spawned workers are the other hazard. A spawned worker reads its start-up data from a pipe its parent writes
after starting it, then opens the pool's semaphores by name. A parent interrupted between the two closes the pipe
(the worker prints an EOFError traceback); a parent that exits while a worker is still starting removes the
semaphores under it (FileNotFoundError). And a Ctrl-C, which a terminal sends to the whole process group,
reaches a worker before its initializer could ignore it (a KeyboardInterrupt traceback). `SafeStartPool`
closes all three: while it starts a worker (inside `submit`) SIGINT and SIGTERM wait (`interrupts_held`), so a
worker is always started whole; each worker begins with SIGINT blocked (inherited), ignores it in its first
act and only then unblocks it; and `stop_pool` ends workers that may still be starting with SIGTERM (left at
its default, so they die quietly) and SIGKILL after that, before the parent can remove anything.
"""

from __future__ import annotations

import _thread
import functools
import multiprocessing
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from types import FrameType
from typing import Any

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where a Ctrl-C would be (a KeyboardInterrupt, so the same handlers keep finished work)."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


def _redeliver_interrupts(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    """An unraisable-exception hook that delivers again an interrupt that Python had to drop.

    A KeyboardInterrupt raised inside a `__del__` or a weakref callback cannot leave it: Python prints "Exception
    ignored in ..." with a traceback and goes on as if no Ctrl-C had come. z3 objects free themselves in
    `__del__` (one per term, and a context's can take long), so a Ctrl-C often lands there. This hook prints
    nothing for it and signals the main thread again (the same signal: SIGTERM for `Terminated`) once the hook
    has returned; should that land in a finalizer again, it comes back here. Any other exception goes to
    `previous`.

    The signal is sent from a helper thread: a handler runs at the main thread's next check for signals, and a
    signal sent from the hook itself would be handled (and raised) inside the hook."""

    def hook(unraisable: Any) -> object:
        kind = unraisable.exc_type
        if not (isinstance(kind, type) and issubclass(kind, KeyboardInterrupt)):
            return previous(unraisable)
        signum = signal.SIGTERM if issubclass(kind, Terminated) else signal.SIGINT
        returned: list[bool] = []

        def deliver() -> None:
            while not returned:
                time.sleep(0.001)
            _thread.interrupt_main(signum)

        threading.Thread(target=deliver, name="collsynth-interrupt-redelivery", daemon=True).start()
        returned.append(True)  # the hook's last act: nothing after it checks for signals
        return None

    return hook


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread, and an interrupt
    raised where Python must drop it (a finalizer) is delivered again (`_redeliver_interrupts`). Outside the
    main thread (where Python cannot install handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _redeliver_interrupts(previous_hook)
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def interrupts_held() -> Iterator[None]:
    """Within the block SIGINT and SIGTERM wait: one that arrives is acted on when the block ends, by the handler
    in place then. Processes started in the block begin with SIGINT blocked (the signal mask is inherited), so a
    Ctrl-C to the process group waits until they unblock it (`_start_worker`). Keep the block short. Outside the
    main thread the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        arrived.append(signum)

    # Python runs handlers in the main thread whichever thread the kernel picked, so swapping the handlers holds
    # the signal for the whole process; the mask only matters for what children inherit.
    previous = {signum: signal.signal(signum, hold) for signum in HELD_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a SIGINT held by the mask reaches `hold` here
        for held, handler in previous.items():
            signal.signal(held, handler)
        for signum in dict.fromkeys(arrived):
            signal.raise_signal(signum)  # now acted on as usual (a KeyboardInterrupt, an exit, or nothing)


def release_frames(error: BaseException) -> None:
    """Drops the tracebacks of `error` and of the exceptions it was raised from or while handling, clearing the
    locals of their finished frames first (for whoever else holds a traceback; frames still running are left as
    they are). Clearing alone is not enough: a finished frame keeps its function, and a closure keeps what it
    closed over. A re-raised `error` gets a traceback again from where it is raised.

    An interrupt's traceback holds the frames it cut short and everything they held (a sweep's z3 contexts), and
    whatever is raised while it is handled links back to it (`__context__`): matplotlib, drawing the report of an
    interrupted sweep, keeps such exceptions in reference cycles. The cyclic collector then frees those contexts
    in no set order, and a z3 context deleted before its terms frees them one scan of its whole term table per
    level of nesting (minutes for a big one). Cleared, they are freed at once, by reference counting."""
    pending: list[BaseException | None] = [error]
    seen: set[int] = set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        traceback.clear_frames(current.__traceback__)
        current.__traceback__ = None
        pending += [current.__cause__, current.__context__]


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
    would otherwise find the pool's semaphores gone when the parent exits)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())  # no public API for this before 3.14
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        if process.is_alive():
            process.terminate()
    for process in processes:
        process.join(timeout=grace_s)
        if process.is_alive():
            process.kill()
            process.join(timeout=grace_s)
