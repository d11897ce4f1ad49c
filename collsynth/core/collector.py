"""Pausing Python's cyclic garbage collector around work that builds large acyclic data.

The compiler (at its entry point, compile_program), the simulator's event loop and the tuner's search allocate
many small objects (instructions, steps, heap entries, finish times, compiled IRs, plans) and keep many alive:
the collector scans them over and over as they grow and can free nothing (none of it is cyclic). Reference
counting still frees everything; the collector runs again, as usual, once the outermost pause ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collector() -> Iterator[None]:
    """The cyclic collector off for the block (nested pauses: only the outermost turns it back on)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
