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

Layout (start-up of every command imports this module): `interrupts_held` lives in signals_held, the pool half in
signals_pool (loaded on first use of its names here, as it imports multiprocessing); both are re-exported here.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any

from collsynth.core.signals_held import HELD_SIGNALS as HELD_SIGNALS
from collsynth.core.signals_held import interrupts_held as interrupts_held

if TYPE_CHECKING:
    from collsynth.core.signals_pool import SafeStartPool as SafeStartPool
    from collsynth.core.signals_pool import stop_pool as stop_pool

# Every command's entry (`collsynth --help` included) imports this module; the pool half needs multiprocessing
# and concurrent.futures (~40 ms of start-up), so it lives in signals_pool and is loaded when first named here.
_POOL_NAMES = frozenset({"SafeStartPool", "stop_pool"})


def __getattr__(name: str) -> Any:
    if name in _POOL_NAMES:
        from collsynth.core import signals_pool

        return getattr(signals_pool, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

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
def keeping_finished_work(interrupt: BaseException) -> Iterator[None]:
    """The block in which a command, stopped by `interrupt` (Ctrl-C, SIGTERM, or an exception raised from one),
    saves its finished work: the frames the interrupt cut short are dropped first (`release_frames`: a solver's
    state goes now, by reference counting, not later through whatever the saving leaves in reference cycles), and
    further signals wait until the block ends (`interrupts_held`), so the files written are whole."""
    release_frames(interrupt)
    with interrupts_held():
        yield


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
    import traceback  # here, not at the top: every command's start-up imports this module

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
