"""SIGTERM handled like Ctrl-C: `terminate_as_interrupt()` makes a SIGTERM raise KeyboardInterrupt in the main
thread, so every command's Ctrl-C path (keep finished work, write what is done, exit 130) also runs when a
scheduler or `kill` stops it. The previous handler comes back when the block ends."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class Terminated(KeyboardInterrupt):
    """A SIGTERM, raised where a Ctrl-C would be (a KeyboardInterrupt, so the same handlers keep finished work)."""


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(f"signal {signum}")


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main thread. Outside the
    main thread (where Python cannot install handlers) the block runs unchanged."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
