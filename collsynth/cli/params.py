"""Option types that refuse bad values in one line before any work starts: finite positive seconds, integers
within a range and a sanity cap (the cap names its environment variable), sizes within a cap."""

from __future__ import annotations

import math
import os
from typing import Any

import click

from collsynth.core.caps import CHUNKS_PER_RANK, PROGRAM_RANKS, RANKS, STEPS, Cap


class Seconds(click.ParamType):
    """A finite time limit in seconds, > 0 (`nan`, `inf` and negative values are refused)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a time limit in seconds; write e.g. 60 or 2.5", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive finite time limit in seconds; write e.g. 60 or 2.5", param, ctx)
        return seconds


class FiniteFloat(click.ParamType):
    """A finite number, > `minimum` (or >= it with `inclusive`): `nan` and `inf` are refused, as are values a
    cost model would divide by (a bandwidth of 0) or turn into garbage (a negative latency)."""

    name = "number"

    def __init__(self, minimum: float = 0.0, *, inclusive: bool = False, example: str = "1.5") -> None:
        self.minimum, self.inclusive, self.example = minimum, inclusive, example

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number; write e.g. {self.example}", param, ctx)
        above = number >= self.minimum if self.inclusive else number > self.minimum
        if not math.isfinite(number) or not above:
            bound = f"{'>=' if self.inclusive else '>'} {self.minimum:g}"
            self.fail(f"{value!r} is not a finite number {bound}; write e.g. {self.example}", param, ctx)
        return number


class OutputPath(click.Path):
    """An output file or directory (click.Path's options), refused at option time, before any work, when it
    could not be written (see `core.files.check_writable`): nothing is solved only to fail at the end."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        from collsynth.core.files import OutputError, check_writable

        converted = super().convert(value, param, ctx)
        try:
            check_writable(os.fsdecode(converted), directory=not self.file_okay)
        except OutputError as exc:
            self.fail(str(exc), param, ctx)
        return converted


class CappedInt(click.ParamType):
    """An integer >= `minimum` and, when `cap` is given, within that sanity cap."""

    name = "integer"

    def __init__(self, minimum: int = 1, cap: Cap | None = None, maximum: int | None = None) -> None:
        self.minimum, self.cap, self.maximum = minimum, cap, maximum

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        else:
            text = str(value).strip()
            digits = text[1:] if text[:1] in "+-" else text
            if not (digits.isascii() and digits.isdigit()) or len(digits) > 18:
                self.fail(f"{value!r} is not a whole number", param, ctx)
            number = int(text)
        if number < self.minimum:
            self.fail(f"{number} is below {self.minimum}", param, ctx)
        if self.maximum is not None and number > self.maximum:
            self.fail(f"{number} is above {self.maximum}", param, ctx)
        if self.cap is not None and number > self.cap.limit():
            self.fail(f"{number} {self.cap.what} is above the cap of {self.cap.limit()}; raise it with "
                      f"{self.cap.env}=N if you mean it", param, ctx)
        return number


SECONDS = Seconds()
CHUNKS_OPTION = CappedInt(1, CHUNKS_PER_RANK)  # -c/--chunks of a solver
STEPS_OPTION = CappedInt(1, STEPS)  # -s/--steps, --max-steps
ROUNDS_OPTION = CappedInt(1, STEPS)  # -r/--rounds: a schedule has at least one round per step
RANKS_OPTION = CappedInt(1, RANKS)
ROOT_OPTION = CappedInt(0, RANKS)  # --root: a rank
PROGRAM_RANKS_OPTION = CappedInt(1, PROGRAM_RANKS)  # ranks of a compiled program
SEED = CappedInt(0, None, (1 << 32) - 1)  # numpy's seeds
