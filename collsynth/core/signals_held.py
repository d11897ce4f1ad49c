"""Signals held for a short block (`interrupts_held`), the piece of collsynth.core.signals that its pool half
(signals_pool) needs too; both modules import it from here, so neither imports the other at load time."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
