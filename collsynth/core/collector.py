"""Pausing Python's cyclic garbage collector around work that builds large acyclic data.

The compiler (at its entry point, compile_program), the simulator's event loop and the tuner's search allocate
many small objects (instructions, steps, heap entries, finish times, compiled IRs, plans) and keep many alive:
the collector scans them over and over as they grow and can free nothing (none of it is cyclic). Reference
counting still frees everything; the collector runs again, as usual, once the outermost pause ends.

`promote=True` (the tuner's search): at the end, every object the collector tracks moves to its oldest
generation unscanned (`gc.freeze` then `gc.unfreeze`, each a constant-time splice of the generation lists).
Otherwise the first young collection after the pause scans everything the pause made and kept (a search's
compiled IRs and plans: 0.1 s of the ~2-3 s a DGX-1 size takes). Nothing leaks: the oldest generation is
still collected, by the next full collection, as it would be after the young collections that promote them.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_collector(*, promote: bool = False) -> Iterator[None]:
    """The cyclic collector off for the block (nested pauses: only the outermost turns it back on, and only its
    `promote` counts; see the module's docstring). Objects someone froze (gc.freeze) stay frozen."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            if promote and not gc.get_freeze_count():  # unfreeze would thaw a caller's frozen objects too
                gc.freeze()
                gc.unfreeze()
            gc.enable()
