"""An IR's steps as columns (numpy arrays), read once and shared by the checks that scan every step.

`step_table(ir)` reads every field of every step once (a `map` per field, in C) into one array per field, all
threadblocks of all GPUs in (gpu, tb, step) order; the compiler's checks (collsynth.compiler.checks), the IR's
validation (collsynth.ir.validate) and the deadlock check (collsynth.ir.deadlock) then test all steps at once.
The table of an IR is kept while that IR lives (the same IR is checked by several of them in a row; an IR is
immutable), and dropped with it.

Integer fields are read through `operator.index`, so a field that is not an integer (a float, a string) makes
`step_table` raise TypeError instead of being rounded: a caller that must name such a field (validate) then
checks step by step. A type or buffer name that is not an MSCCL one gets code -1.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain, repeat
from operator import attrgetter, index

import numpy as np

from collsynth.ir import BUFFERS, NOP, RECEIVING_TYPES, SENDING_TYPES, STEP_TYPES, Algo, Gpu

TYPE_CODE = {kind: code for code, kind in enumerate(STEP_TYPES)}  # a step type's code: its place in STEP_TYPES
BUFFER_CODE = {buf: code for code, buf in enumerate(BUFFERS)}
NOP_CODE = TYPE_CODE[NOP]
SENDS = np.array([kind in SENDING_TYPES for kind in STEP_TYPES] + [False])  # by code; code -1: the last entry
RECEIVES = np.array([kind in RECEIVING_TYPES for kind in STEP_TYPES] + [False])


@dataclass(frozen=True, eq=False)
class StepTable:
    """Per threadblock (numbered globally, in (gpu, tb) order) and per step (in (gpu, tb, step) order)."""

    gpu_first: np.ndarray  # per gpu (position), + 1: its first global threadblock
    tb_gpu: np.ndarray  # per threadblock: its gpu's position
    tb_id: np.ndarray
    tb_send: np.ndarray
    tb_recv: np.ndarray
    tb_chan: np.ndarray
    tb_first: np.ndarray  # per threadblock, + 1: its first step
    step_tb: np.ndarray  # per step: its global threadblock
    s: np.ndarray
    type: np.ndarray  # code in STEP_TYPES, -1: not an MSCCL step type
    srcbuf: np.ndarray  # code in BUFFERS, -1: not an IR buffer
    srcoff: np.ndarray
    dstbuf: np.ndarray
    dstoff: np.ndarray
    cnt: np.ndarray
    depid: np.ndarray
    deps: np.ndarray
    hasdep: np.ndarray  # bool
    # What a check decided from this table, for the next check of the same IR (collsynth.ir.deadlock: whether the
    # IR completes, per capacity): dropped with the table
    decided: dict[int, bool] = field(default_factory=dict, init=False)

    @property
    def index(self) -> np.ndarray:
        """Per step: its index in its threadblock."""
        return np.arange(self.step_tb.size) - self.tb_first[self.step_tb]


_tables: dict[int, StepTable] = {}  # id(ir) -> its table, while the IR lives


def step_table(ir: Algo, *, keep: bool = False) -> StepTable:
    """The IR's table: the one kept for it, else read now (and kept with `keep`, until `forget_table(ir)` or
    the IR's end: the compiler keeps it for its own checks in a row, then forgets it)."""
    table = _tables.get(id(ir))
    if table is None:
        table = _read(ir)
        if keep:
            _tables[id(ir)] = table
            weakref.finalize(ir, _tables.pop, id(ir), None)
    return table


def forget_table(ir: Algo) -> None:
    """Drop the table kept for `ir` (its memory: about 80 bytes per step)."""
    _tables.pop(id(ir), None)


def keep_table(ir: Algo, table: StepTable) -> None:
    """Keep `table` as `ir`'s (lower_to_ir: the table it made from the columns it made the IR's steps from), until
    `forget_table(ir)` or the IR's end."""
    _tables[id(ir)] = table
    weakref.finalize(ir, _tables.pop, id(ir), None)


STEP_FIELDS = ("s", "type", "srcbuf", "srcoff", "dstbuf", "dstoff", "cnt", "depid", "deps", "hasdep")
TbRow = tuple[int, int, int, int, int]  # a threadblock's id, send, recv, chan and step count
GpuColumns = tuple[Sequence[TbRow], Mapping[str, Iterable[object]], int]  # tbs, STEP_FIELDS -> values, step count


def _ints(values: object, count: int) -> np.ndarray:
    return np.fromiter(map(index, values), dtype=np.int64, count=count)  # type: ignore[call-overload]


def _int_column(values: Iterable[object], count: int) -> np.ndarray:
    """`_ints` of a field's `count` values, read by numpy at once (a few times faster than `index` per value): the
    same array, or the same refusal where a value is not an integer that fits int64 (numpy infers no integer
    dtype then: float, object, unsigned, or a second axis)."""
    array = np.array(values if isinstance(values, list) else list(values))
    if array.shape != (count,):
        raise ValueError(f"{array.shape[0] if array.ndim else 0} values, not {count}")
    if count and array.dtype.kind not in "bi":
        raise TypeError(f"not integers: {array.dtype}")
    return array.astype(np.int64, copy=False)


def _read(ir: Algo) -> StepTable:
    def gpu_columns(gpu: Gpu) -> GpuColumns:
        steps = list(chain.from_iterable(tb.steps for tb in gpu.tbs))
        return ([(tb.id, tb.send, tb.recv, tb.chan, len(tb.steps)) for tb in gpu.tbs],
                {name: map(attrgetter(name), steps) for name in STEP_FIELDS}, len(steps))

    return table_of(len(ir.gpus), map(gpu_columns, ir.gpus))


def table_of(ngpus: int, gpus: Iterable[GpuColumns]) -> StepTable:
    """The table of `ngpus` GPUs' columns, made (lazily) a GPU at a time: its steps' fields, each an iterable in
    (tb, step) order, stay in cache while they are read. `_read` gives it the fields of an IR's Steps; lower_to_ir
    gives it the very values it stored into those Steps' fields (the same table, made without reading them back)."""
    tb_rows: list[TbRow] = []
    tb_count = np.zeros(ngpus, dtype=np.int64)
    parts: dict[str, list[np.ndarray]] = {name: [] for name in STEP_FIELDS}
    for g, (rows, columns, n) in enumerate(gpus):
        tb_rows.extend(rows)
        tb_count[g] = len(rows)
        for name in STEP_FIELDS:
            values = columns[name]
            if name in ("type", "srcbuf", "dstbuf"):
                code: dict[object, int] = TYPE_CODE if name == "type" else BUFFER_CODE  # type: ignore[assignment]
                parts[name].append(np.fromiter(map(code.get, values, repeat(-1)), dtype=np.int8, count=n))
            elif name == "hasdep":
                parts[name].append(np.fromiter(values, dtype=bool, count=n))  # type: ignore[call-overload]
            else:
                parts[name].append(_int_column(values, n))
    col = {name: np.concatenate(arrays) if arrays else np.empty(0, dtype=np.int8 if name in ("type", "srcbuf",
           "dstbuf") else bool if name == "hasdep" else np.int64) for name, arrays in parts.items()}
    ntbs = len(tb_rows)
    gpu_first = np.zeros(ngpus + 1, dtype=np.int64)
    np.cumsum(tb_count, out=gpu_first[1:])
    lengths = _ints((row[4] for row in tb_rows), ntbs)
    tb_first = np.zeros(ntbs + 1, dtype=np.int64)
    np.cumsum(lengths, out=tb_first[1:])
    return StepTable(
        gpu_first=gpu_first, tb_gpu=np.repeat(np.arange(ngpus), tb_count),
        tb_id=_ints((row[0] for row in tb_rows), ntbs), tb_send=_ints((row[1] for row in tb_rows), ntbs),
        tb_recv=_ints((row[2] for row in tb_rows), ntbs), tb_chan=_ints((row[3] for row in tb_rows), ntbs),
        tb_first=tb_first, step_tb=np.repeat(np.arange(ntbs), lengths), **col)
