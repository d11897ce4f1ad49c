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
from dataclasses import dataclass
from itertools import chain, repeat
from operator import attrgetter, index

import numpy as np

from collsynth.ir import BUFFERS, NOP, RECEIVING_TYPES, SENDING_TYPES, STEP_TYPES, Algo

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


def _ints(values: object, count: int) -> np.ndarray:
    return np.fromiter(map(index, values), dtype=np.int64, count=count)  # type: ignore[call-overload]


def _read(ir: Algo) -> StepTable:
    tbs = [(g, tb) for g, gpu in enumerate(ir.gpus) for tb in gpu.tbs]
    ntbs = len(tbs)
    gpu_first = np.zeros(len(ir.gpus) + 1, dtype=np.int64)
    np.cumsum([len(gpu.tbs) for gpu in ir.gpus], out=gpu_first[1:])
    lengths = np.fromiter((len(tb.steps) for _, tb in tbs), dtype=np.int64, count=ntbs)
    tb_first = np.zeros(ntbs + 1, dtype=np.int64)
    np.cumsum(lengths, out=tb_first[1:])
    n = int(tb_first[-1])
    ints = {name: np.empty(n, dtype=np.int64) for name in ("s", "srcoff", "dstoff", "cnt", "depid", "deps")}
    codes = {name: np.empty(n, dtype=np.int8) for name in ("type", "srcbuf", "dstbuf")}
    hasdep = np.empty(n, dtype=bool)
    at = 0
    for gpu in ir.gpus:  # a GPU at a time: its steps stay in cache while every field is read
        steps = list(chain.from_iterable(tb.steps for tb in gpu.tbs))
        end = at + len(steps)
        for name, column in ints.items():
            column[at:end] = _ints(map(attrgetter(name), steps), len(steps))
        for name, code_column in codes.items():
            code = TYPE_CODE if name == "type" else BUFFER_CODE
            code_column[at:end] = np.fromiter(map(code.get, map(attrgetter(name), steps), repeat(-1)), dtype=np.int8,
                                         count=len(steps))
        hasdep[at:end] = np.fromiter(map(attrgetter("hasdep"), steps), dtype=bool, count=len(steps))
        at = end
    return StepTable(
        gpu_first=gpu_first, tb_gpu=np.repeat(np.arange(len(ir.gpus)), np.diff(gpu_first)),
        tb_id=_ints((tb.id for _, tb in tbs), ntbs), tb_send=_ints((tb.send for _, tb in tbs), ntbs),
        tb_recv=_ints((tb.recv for _, tb in tbs), ntbs), tb_chan=_ints((tb.chan for _, tb in tbs), ntbs),
        tb_first=tb_first, step_tb=np.repeat(np.arange(ntbs), lengths),
        s=ints["s"], type=codes["type"], srcbuf=codes["srcbuf"], srcoff=ints["srcoff"], dstbuf=codes["dstbuf"],
        dstoff=ints["dstoff"], cnt=ints["cnt"], depid=ints["depid"], deps=ints["deps"], hasdep=hasdep)
