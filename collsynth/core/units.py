"""Byte sizes as users write them: `1KB`, `4MB`, `1GB`, `1048576`.

KB, MB and GB are powers of 1024, as in nccl-tests (`-b 1M` is 1048576 bytes); the explicit binary
spellings KiB/MiB/GiB and the bare letters K/M/G mean the same. Used by every stage that takes a size
(synthesis cost models, the simulator, the interpreter, the catalog).
"""

from __future__ import annotations

import re
from fractions import Fraction

from collsynth.core.caps import SIZE_BYTES
from collsynth.core.errors import CollsynthError


class SizeError(CollsynthError):
    """A size string that is not a whole number of bytes."""


_FACTORS = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str | int) -> int:
    """`'1MB'` -> 1048576; `'1.5KB'` -> 1536; `'512'` -> 512. Raises SizeError for anything else."""
    if isinstance(text, bool):
        raise SizeError(f"size {text!r} is not a number of bytes; write e.g. 1048576 or 1MB")
    if isinstance(text, int):
        if text < 0:
            raise SizeError(f"size {text} is negative; sizes are byte counts >= 0")
        SIZE_BYTES.check(text, f"size {text}", SizeError)
        return text
    match = _SIZE.match(str(text))
    if not match:
        raise SizeError(f"cannot read size {text!r}; write a byte count like 1048576, 64KB, 4MB or 1GB")
    number, prefix, _ = match.groups()
    if len(number) > 40:  # past any cap; Fraction of a huge digit string is slow
        SIZE_BYTES.check(float("inf"), f"size {str(text)[:24]!r}... ({len(number)} digits)", SizeError)
    value = Fraction(number) * _FACTORS[prefix.upper()]  # exact: a float rounds long byte counts
    if value.denominator != 1:
        raise SizeError(f"size {text!r} is not a whole number of bytes")
    SIZE_BYTES.check(int(value), f"size {text!r}", SizeError)
    return int(value)


def format_size(nbytes: int) -> str:
    """1048576 -> `'1MB'`; 1536 -> `'1.5KB'`; 100 -> `'100B'`.

    Exact when the size is a multiple of 1/100 of its unit (parse_size reads it back); otherwise the
    value is rounded to two decimals, for display only."""
    if nbytes < 0:
        raise SizeError(f"size {nbytes} is negative; sizes are byte counts >= 0")
    for prefix in ("T", "G", "M", "K"):
        factor = _FACTORS[prefix]
        if nbytes >= factor:
            text = f"{nbytes / factor:.2f}".rstrip("0").rstrip(".")
            return f"{text}{prefix}B"
    return f"{nbytes}B"
