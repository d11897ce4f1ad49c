"""Sanity caps on what a user may ask for: ranks, chunks, steps, sizes, input bytes.

A cap keeps a typo (`-c 1000000`, `"num_ranks": 1e9`, `--size 64GB`) from hanging the machine or eating its
memory; it is not a limit of the method. Every cap names itself and the environment variable that raises it,
so a user who really means it can say so: `COLLSYNTH_MAX_RANKS=100000 collsynth ...`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from collsynth.core.errors import CollsynthError


class CapError(CollsynthError):
    """A request above a sanity cap (the message names the cap and how to raise it)."""


@dataclass(frozen=True)
class Cap:
    """One sanity cap: `what` it counts, its default, and the environment variable that overrides it."""

    what: str
    default: int
    env: str

    def limit(self) -> int:
        """The cap in force: the environment variable when it holds a positive integer, else the default."""
        text = os.environ.get(self.env, "").strip()
        if text.isdigit() and int(text) > 0:
            return int(text)
        return self.default

    def check(self, value: int | float, label: str, error: type[Exception] = CapError) -> None:
        """Raise `error` when `value` is above the cap; `label` says which input holds it."""
        limit = self.limit()
        if value > limit:
            shown = f"{value:g}" if isinstance(value, float) else str(value)
            raise error(f"{label}: {shown} {self.what} is above the cap of {limit} {self.what}; "
                           f"raise it with {self.env}=N if you mean it")


RANKS = Cap("ranks", 16384, "COLLSYNTH_MAX_RANKS")
LINKS = Cap("links", 1 << 20, "COLLSYNTH_MAX_LINKS")
CHUNKS = Cap("chunks", 1 << 16, "COLLSYNTH_MAX_CHUNKS")  # chunks of one collective / one buffer
CHUNKS_PER_RANK = Cap("chunks per rank", 256, "COLLSYNTH_MAX_CHUNKS_PER_RANK")  # a solver's -c
PLACEMENTS = Cap("chunk placements", 1 << 22, "COLLSYNTH_MAX_PLACEMENTS")  # ranks^2 x chunks of a collective
STEPS = Cap("steps", 1024, "COLLSYNTH_MAX_STEPS")  # steps of a schedule / a solver's -s
SENDS = Cap("sends", 1 << 22, "COLLSYNTH_MAX_SENDS")  # sends of one schedule
BUFFER_BYTES = Cap("bytes", 4 << 30, "COLLSYNTH_MAX_BUFFER_BYTES")  # per-rank buffer an interpreter allocates
SIZE_BYTES = Cap("bytes", 1 << 50, "COLLSYNTH_MAX_SIZE_BYTES")  # one message size (--size, a plan's sizes): 1 PiB
INPUT_BYTES = Cap("bytes", 64 << 20, "COLLSYNTH_MAX_INPUT_BYTES")  # one input file
PROGRAM_RANKS = Cap("ranks", 512, "COLLSYNTH_MAX_PROGRAM_RANKS")  # a compiled library program (algorithms show)
DRAW_RANKS = Cap("ranks", 512, "COLLSYNTH_MAX_DRAW_RANKS")  # a drawing stays readable (and fast) below this
