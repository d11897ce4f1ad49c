"""`Algorithm.to_json()`'s text (indent=1), produced piece by piece: the same bytes without the whole document.

`json.dumps(..., indent=1)` runs json's pure-Python encoder over `to_dict()`, which makes a list per send: for a
1024-rank AllToAll (16.8M sends) that is several GB of small objects before the ~1.7 GB text. Here the other
values (name, topology, collective, provenance) come from the same indenting encoder a bounded piece at a time
(a 1024-rank AllToAll's collective alone is ~2M placement rows), and the sends go out a bounded batch at a
time: each batch's values are encoded by json's C encoder (used when there is no indent; numbers, strings, NaN
and null are spelled exactly as the indenting encoder spells them), with a NUL byte as separator -- a character
the encoder always escapes inside strings -- that is then replaced by the indentation `indent=1` puts between
the values and rows.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

# What is read of an Algorithm, its steps and sends (Protocols: algorithm.py imports this module, not back).


class Send(Protocol):
    @property
    def chunk(self) -> int: ...
    @property
    def src(self) -> int: ...
    @property
    def dst(self) -> int: ...
    @property
    def op(self) -> str: ...
    @property
    def start_us(self) -> float | None: ...
    @property
    def duration_us(self) -> float | None: ...


class Step(Protocol):
    @property
    def rounds(self) -> int: ...
    @property
    def sends(self) -> Sequence[Send]: ...


class Algorithm(Protocol):
    @property
    def steps(self) -> Sequence[Step]: ...
    def to_dict(self, steps: bool = True) -> dict[str, Any]: ...

BATCH_SENDS = 1 << 14  # sends encoded at a time: bounds the temporary rows and text (a few MB)

_flat = json.JSONEncoder(separators=("\0", ":")).encode  # C encoder: no indent
_INDENTED = json.JSONEncoder(indent=1)  # json.dumps(..., indent=1)'s encoder
# indent=1 layout: steps at depth 2, a step's keys at 3, a send's row at 4, its values at 5
_ROW_START = "    [\n     "
_ROW_END = "\n    ]"
_ROW_BREAK = _ROW_END + ",\n" + _ROW_START
_VALUE_BREAK = ",\n     "


def send_row(send: Send) -> list[Any]:
    """A send as its JSON row: [chunk, src, dst, op] and, for a timed schedule, [start_us, duration_us] after."""
    if send.start_us is None:
        return [send.chunk, send.src, send.dst, send.op]
    return [send.chunk, send.src, send.dst, send.op, send.start_us, send.duration_us]


def _rows_text(sends: Sequence[Send]) -> str:
    """The rows of `sends` as indent=1 writes them inside a step's "sends" list (no brackets around them)."""
    flat = _flat([send_row(send) for send in sends])  # '[[v\0v\0v\0v]\0[v...]]'
    # ']\0[' only where a row ends and the next starts: ']' and '[' are never the last / first character of a
    # scalar's text, and every other '\0' separates two values of one row.
    body = flat[2:-2].replace("]\0[", _ROW_BREAK).replace("\0", _VALUE_BREAK)
    return _ROW_START + body + _ROW_END


def _sends_text(sends: Sequence[Send], batch: int) -> Iterator[str]:
    if not sends:
        yield "[]"
        return
    yield "[\n"
    for first in range(0, len(sends), batch):
        if first:
            yield ",\n"
        yield _rows_text(sends[first:first + batch])
    yield "\n   ]"


def iter_algorithm_json(algorithm: Algorithm, batch: int = BATCH_SENDS) -> Iterator[str]:
    """Pieces whose concatenation is `algorithm.to_json()` (indent=1), byte for byte; at most `batch` sends
    are encoded at a time, and the other values (a large collective's placements too) a bounded piece at a time."""
    doc = algorithm.to_dict(steps=False)
    yield "{"
    for k, (key, value) in enumerate(doc.items()):
        yield ("," if k else "") + "\n " + json.dumps(key) + ": "
        if key == "steps":
            yield from _steps_text(algorithm, batch)
        else:
            yield from _value_text(value)
    yield "\n}"


def _steps_text(algorithm: Algorithm, batch: int) -> Iterator[str]:
    if not algorithm.steps:
        yield "[]"
        return
    yield "[\n"
    for t, step in enumerate(algorithm.steps):
        yield (",\n  {" if t else "  {") + f'\n   "rounds": {_flat(step.rounds)},\n   "sends": '
        yield from _sends_text(step.sends, batch)
        yield "\n  }"
    yield "\n ]"


def _value_text(value: Any, piece_chars: int = 1 << 20) -> Iterator[str]:
    """`value` as indent=1 writes it one level deep (as the value of a top-level key), in pieces of about
    `piece_chars`: the indenting encoder's text of `value` alone, with one more space after every newline (it
    writes newlines only as indentation; strings escape theirs), without ever holding the whole text."""
    pending: list[str] = []
    size = 0
    for piece in _INDENTED.iterencode(value):
        pending.append(piece)
        size += len(piece)
        if size >= piece_chars:
            yield "".join(pending).replace("\n", "\n ")
            pending, size = [], 0
    if pending:
        yield "".join(pending).replace("\n", "\n ")


def write_algorithm_json(algorithm: Algorithm, path: str | os.PathLike[str]) -> Path:
    """Write `algorithm.to_json()` to `path` atomically (`write_atomic`'s rules) without building it whole."""
    from collsynth.core.files import write_atomic_pieces

    return write_atomic_pieces(path, iter_algorithm_json(algorithm))
