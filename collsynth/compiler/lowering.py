"""Lowering passes: replicate_instances, insert_nops, lower_to_ir.

`replicate_instances` turns the placed program into concrete MSCCL-IR threadblocks: the program is
copied `instances` times (instance i on channels shifted by i * channels-per-instance, as MSCCLang
does) and every slot gets its IR buffer and offset. Named scratch buffers are concatenated into "s" in
creation order, each `size * instances` long. Interleaved (the default), a step of `count` chunks at
`index` of instance i sits at `start + index * instances + i * count` of every buffer (start: 0 for
input/output, the scratch buffer's offset in "s"); batched, at `start + size * i + index`.
Threadblocks are then numbered by (send, recv, chan) as MSCCLang does.

Interleaved, each chunk is split in `instances` parts, part k of chunk j at j * instances + k, and a
step of `count` chunks is replicated as blocks of `count` parts (MSCCLang's layout). Across all
instances a step still moves exactly the parts of its chunks, each to the same part of its
destination chunk, whatever its count - as long as both its buffers use this layout. (MSCCLang keeps
scratch batched, which moves parts to other parts whenever a step of more than one chunk goes between
scratch and input/output, a wrong result; here scratch follows the input/output layout.) But one
instance's block is then not one chunk's parts, so steps of different counts over the same chunks
overlap across instances: instance 1 of a 2-chunk step at 0 covers parts 2..3, which are parts 0 and
1 of chunk 1, which instances 0 and 1 of a 1-chunk step on chunk 1 cover. Per-instance dependencies
cannot see that, so `cross_instance_waits` traces every instance's concrete positions again, and a
step also waits for the steps of other instances that touched its positions before it (read after
write, write after read, write after write). Those waits follow the order of the DAG's own
dependencies, which the schedule (and hence every threadblock and connection) respects: no cycle.

Every step's buffer operands name slots of its own GPU: the slot a send reads, a receive writes, or
a receive-reduce step's local operand (which is also where rrc/rrcs write the sum). MSCCL reads the
operands it needs by step type and ignores the others.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, fields, replace
from functools import partial
from itertools import chain, compress, islice, repeat
from operator import add, attrgetter, itemgetter
from typing import NamedTuple

import numpy as np

from collsynth.collectives import Collective
from collsynth.compiler.dag import Instr
from collsynth.compiler.deps import Dep, Dependencies, Waits
from collsynth.compiler.instances import cross_instance_waits, instance_waits
from collsynth.compiler.placement import TbPlan
from collsynth.ir import (
    NOP,
    Algo,
    Gpu,
    Step,
    Threadblock,
    coll_spelling,
)
from collsynth.ir.table import STEP_FIELDS, GpuColumns, keep_table, table_of
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.language.program import Program, buffer_size


class LStep(NamedTuple):
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    deps: tuple[Dep, ...] = ()
    hasdep: bool = False
    line: int = 0

    def __str__(self) -> str:
        wait = " after " + ", ".join(f"tb{a}.s{b}" for a, b in self.deps) if self.deps else ""
        flag = " [hasdep]" if self.hasdep else ""
        if self.type == NOP:
            return f"nop{wait}{flag}"
        return f"{self.type} {self.srcbuf}[{self.srcoff}] -> {self.dstbuf}[{self.dstoff}] x{self.cnt}{wait}{flag}"


# An LStep from all 9 fields in order, without NamedTuple.__new__'s argument handling (half the cost).
lstep_of_fields = partial(tuple.__new__, LStep)
_INSTR_LINE = 11  # Instr.line's position; its first 7 fields are kind, rank, src_buf, src_off, dst_buf, dst_off, cnt


@dataclass(frozen=True, slots=True)
class LTb:
    """One threadblock's steps as columns, one tuple per LStep field in step order (a few objects per threadblock
    instead of two per step: millions fewer to make, scan and free at 1024 ranks); `steps` makes the LSteps."""

    send: int
    recv: int
    chan: int
    types: tuple[str, ...]
    srcbufs: tuple[str, ...]
    srcoffs: tuple[int, ...]
    dstbufs: tuple[str, ...]
    dstoffs: tuple[int, ...]
    cnts: tuple[int, ...]
    deps: tuple[Waits, ...]
    hasdeps: tuple[bool, ...]
    lines: tuple[int, ...]

    @property
    def steps(self) -> tuple[LStep, ...]:
        """The steps, one LStep each (made on each call, for reading)."""
        return tuple(map(lstep_of_fields, zip(self.types, self.srcbufs, self.srcoffs, self.dstbufs, self.dstoffs,
                                              self.cnts, self.deps, self.hasdeps, self.lines, strict=True)))

    @classmethod
    def of_steps(cls, send: int, recv: int, chan: int, steps: Sequence[LStep]) -> LTb:
        """The threadblock of these steps."""
        if not steps:
            return cls(send, recv, chan, (), (), (), (), (), (), (), (), ())
        return cls(send, recv, chan, *zip(*steps, strict=True))


@dataclass(frozen=True)
class TbProgram:
    """Concrete threadblocks per GPU, before nops: the last form before the IR."""

    name: str
    collective: Collective  # at the IR's chunk granularity (instances split every chunk)
    proto: str
    inplace: bool
    instances: int
    gpus: tuple[tuple[LTb, ...], ...]
    sizes: tuple[tuple[int, int, int], ...]  # per GPU: i, o, s chunks
    source: str = ""

    @property
    def nchannels(self) -> int:
        return 1 + max((tb.chan for tbs in self.gpus for tb in tbs), default=0)

    @property
    def nchunksperloop(self) -> int:
        return max(self.collective.input_chunks, self.collective.output_chunks)

    def __str__(self) -> str:
        lines = [f"threadblock program {self.name!r}: {self.collective} instances={self.instances} "
                 f"nchannels={self.nchannels}"]
        for rank, tbs in enumerate(self.gpus):
            i, o, s = self.sizes[rank]
            lines.append(f"  gpu{rank} i={i} o={o} s={s}")
            for t, tb in enumerate(tbs):
                lines.append(f"    tb{t} send={tb.send} recv={tb.recv} chan={tb.chan}")
                lines += [f"      s{k}: {step}" for k, step in enumerate(tb.steps)]
        return "\n".join(lines)


def instance_collective(collective: Collective, instances: int) -> Collective:
    """The collective at the IR's granularity: every chunk split into `instances` parts, part k of the
    chunk at index j sitting at index j * instances + k (what the runtime computes on)."""
    return collective.split(instances)


def replicate_instances(dependencies: Dependencies, program: Program) -> TbProgram:
    """Concrete IR threadblocks for every instance (see the module docstring)."""
    placement = dependencies.placement
    coll = program.collective
    copies = program.instances
    instrs = placement.dag.instrs
    interleaved = program.options.interleaved_replication
    per_instance = 1 + max((tb.chan for tbs in placement.tbs for tb in tbs), default=0)
    sizes = {INPUT: buffer_size(coll, INPUT), OUTPUT: buffer_size(coll, OUTPUT)}
    cross = cross_instance_waits(placement, copies, interleaved)
    layouts, scratch_sizes = [], []
    for rank in range(len(placement.tbs)):
        scratch = program.scratch_sizes(rank)
        base, at = {}, 0
        for name, size in scratch.items():
            base[name] = at
            at += size * copies
        layout = {INPUT: ("i", 0, sizes[INPUT]), OUTPUT: ("o", 0, sizes[OUTPUT])}  # buffer -> IR buffer, start, size
        layout.update((name, ("s", base[name], size)) for name, size in scratch.items())
        layouts.append(layout)
        scratch_sizes.append(at)
    # One instance, every buffer at 0 of its IR buffer (the usual case): only the names change, the same on every rank
    names = {buf: ir for layout in layouts for buf, (ir, _, _) in layout.items()}
    if any(start for layout in layouts for _, start, _ in layout.values()):  # a rank has two scratch buffers
        names = {}
    # Threadblocks are numbered by (send, recv, chan), then by their order in the placement: number them first, so
    # every wait names its final threadblock as it is made.
    new_ids = [_numbered(tbs, copies, per_instance) for tbs in placement.tbs]
    # where instances overlap, every instance's waits at once (else each is its own instance's, renamed)
    overlaps = instance_waits(placement, dependencies.waits, copies, cross, new_ids) if cross else None
    gpus, placed = [], 0
    for rank, (tbs, rank_waits, new_id) in enumerate(zip(placement.tbs, dependencies.waits, new_ids, strict=True)):
        made: list[LTb] = [None] * len(new_id)  # type: ignore[list-item]
        if copies == 1:  # the usual case: every step as it is, on its buffer's IR buffer
            renumber = None if new_id == list(range(len(new_id))) else new_id
            for t, (tb, tb_waits) in enumerate(zip(tbs, rank_waits, strict=True)):
                made[new_id[t]] = _one_instance(tb, tb_waits, instrs, names or layouts[rank], renumber)
            gpus.append(tuple(made))
            continue
        for t, (tb, tb_waits) in enumerate(zip(tbs, rank_waits, strict=True)):
            at = (placed + t) * copies
            own = overlaps[at:at + copies] if overlaps is not None else None
            for k, columns in enumerate(_many_instances(tb.instrs, tb_waits, instrs, layouts[rank], new_id, copies,
                                                        interleaved, own)):
                made[new_id[t * copies + k]] = LTb(tb.send, tb.recv, tb.chan + k * per_instance, *columns)
        gpus.append(tuple(made))
        placed += len(tbs)
    gpu_sizes = tuple((coll.input_chunks * copies, coll.output_chunks * copies, at) for at in scratch_sizes)
    return TbProgram(program.name, instance_collective(coll, copies), program.protocol, coll.inplace, copies,
                     tuple(gpus), gpu_sizes, placement.dag.source)


def _numbered(tbs: Sequence[TbPlan], copies: int, per_instance: int) -> list[int]:
    """The number of every threadblock instance (placed threadblock t, instance k: at t * copies + k) on its rank:
    by (send, recv, chan), then by that place."""
    keys = sorted(((tb.send, tb.recv, tb.chan + k * per_instance), t * copies + k)
                  for t, tb in enumerate(tbs) for k in range(copies))
    new_id = [0] * len(keys)
    for new, (_, old) in enumerate(keys):
        new_id[old] = new
    return new_id


def _one_instance(tb: TbPlan, tb_waits: tuple[Waits, ...], instrs: tuple[Instr, ...],
                  buffers: dict[str, str] | dict[str, tuple[str, int, int]], new_id: list[int] | None) -> LTb:
    """One threadblock when there is one instance (no other instance to wait for either): its instrs' fields as
    columns, on IR buffers (`buffers`: buffer -> IR buffer name, where every buffer starts at 0 of its IR buffer;
    else its rank's layout, buffer -> IR buffer, start, size: offsets move by the start); `new_id` renumbers the
    waited threadblocks (None: every threadblock keeps its number). Its instrs are read once each, fields together
    (a threadblock's instrs lie far apart in the DAG's order)."""
    members = tb.instrs
    n = len(members)
    if n == 0:
        return LTb.of_steps(tb.send, tb.recv, tb.chan, ())
    rows = itemgetter(*members)(instrs) if n > 1 else (instrs[members[0]],)
    kinds, src_bufs, srcoffs, dst_bufs, dstoffs, cnts, lines = zip(*map(_STEP_FIELDS_OF_INSTR, rows), strict=True)
    src, dst = tuple(map(buffers.__getitem__, src_bufs)), tuple(map(buffers.__getitem__, dst_bufs))
    if src and not isinstance(src[0], str):  # a rank's layout: (IR buffer, start, size) per buffer
        srcoffs, dstoffs = tuple(map(add, map(_START, src), srcoffs)), tuple(map(add, map(_START, dst), dstoffs))
        src, dst = tuple(map(_IR_BUF, src)), tuple(map(_IR_BUF, dst))
    deps = tb_waits
    if new_id is not None:  # every wait (a, b) -> (new_id[a], b), regrouped per step: all in C, no call per step
        pairs = tuple(chain.from_iterable(tb_waits))
        renamed = iter(zip(map(new_id.__getitem__, map(_FIRST, pairs)), map(_SECOND, pairs), strict=True))
        deps = tuple(map(tuple, map(islice, repeat(renamed), map(len, tb_waits))))
    return LTb(tb.send, tb.recv, tb.chan, kinds, src, srcoffs, dst, dstoffs, cnts, deps, (False,) * n,  # type: ignore[arg-type]
               lines)


_STEP_FIELDS_OF_INSTR = itemgetter(0, 2, 3, 4, 5, 6, _INSTR_LINE)  # kind, src_buf, src_off, dst_buf, dst_off, cnt, line
_IR_BUF, _START = itemgetter(0), itemgetter(1)


def _many_instances(members: tuple[int, ...], tb_waits: tuple[Waits, ...], instrs: tuple[Instr, ...],
                    layout: dict[str, tuple[str, int, int]], new_id: list[int], copies: int, interleaved: bool,
                    overlaps: Sequence[tuple[Waits, ...]] | None) -> list[tuple]:  # type: ignore[type-arg]
    """The steps of one threadblock's `copies` instances (see the module docstring), per instance: its LTb's
    columns after send, recv and chan. Only the offsets and the waits differ between instances: the other
    columns are made once and shared. `overlaps`: each instance's waits where instances overlap (instance_waits),
    else None: each instance's own waits, renamed."""
    if not members:
        return [((),) * 9] * copies  # (instance_waits: none either)
    rows = [instrs[i] for i in members]
    kinds, src_bufs, dst_bufs, cnts, lines = (tuple(map(getter, rows)) for getter in _KIND_BUFS_CNT_LINE)
    src, dst = [layout[b] for b in src_bufs], [layout[b] for b in dst_bufs]
    srcbufs, dstbufs = tuple(map(_IR_BUF, src)), tuple(map(_IR_BUF, dst))
    # Instance k of a step reads and writes at (first offset) + k * (stride)
    if interleaved:
        src_first = [start + ins.src_off * copies for (_, start, _), ins in zip(src, rows, strict=True)]
        dst_first = [start + ins.dst_off * copies for (_, start, _), ins in zip(dst, rows, strict=True)]
        src_stride = dst_stride = cnts
    else:
        src_first = [start + ins.src_off for (_, start, _), ins in zip(src, rows, strict=True)]
        dst_first = [start + ins.dst_off for (_, start, _), ins in zip(dst, rows, strict=True)]
        src_stride, dst_stride = tuple(map(_SIZE, src)), tuple(map(_SIZE, dst))
    hasdeps = (False,) * len(members)
    instances = []
    for k in range(copies):
        srcoffs = tuple([first + k * stride for first, stride in zip(src_first, src_stride, strict=True)])
        dstoffs = tuple([first + k * stride for first, stride in zip(dst_first, dst_stride, strict=True)])
        if overlaps is not None:
            deps = overlaps[k]
        else:
            deps = tuple([tuple([(new_id[dt * copies + k], ds) for dt, ds in waits]) if waits else ()
                          for waits in tb_waits])
        instances.append((kinds, srcbufs, srcoffs, dstbufs, dstoffs, cnts, deps, hasdeps, lines))
    return instances


_KIND_BUFS_CNT_LINE = tuple(attrgetter(name) for name in ("kind", "src_buf", "dst_buf", "cnt", "line"))
_SIZE = itemgetter(2)


def insert_nops(tbprog: TbProgram) -> TbProgram:
    """A step waiting on several steps keeps one dependency; a nop before it carries each other one
    (MSCCL steps name a single dependency). Waited-on steps get hasdep."""
    gpus = []
    for tbs in tbprog.gpus:
        if any(max(map(len, tb.deps), default=0) > 1 for tb in tbs):
            gpus.append(_with_nops(tbs))
            continue
        # No nop on this GPU (the usual case): every step keeps its index, only hasdep may change.
        waited: list[set[int]] = [set() for _ in tbs]  # per threadblock: its steps that others wait for
        for tb in tbs:
            for t, s in chain.from_iterable(tb.deps):
                waited[t].add(s)
        new_tbs = []
        for tb, mine in zip(tbs, waited, strict=True):
            wrong = mine.symmetric_difference(compress(range(len(tb.hasdeps)), tb.hasdeps))  # flags to flip
            if not wrong:
                new_tbs.append(tb)
                continue
            hasdeps = list(tb.hasdeps)
            for k in wrong:
                hasdeps[k] = not hasdeps[k]
            new_tbs.append(LTb(tb.send, tb.recv, tb.chan, tb.types, tb.srcbufs, tb.srcoffs, tb.dstbufs, tb.dstoffs,
                               tb.cnts, tb.deps, tuple(hasdeps), tb.lines))  # (dataclasses.replace: 3 times the cost)
        gpus.append(tuple(new_tbs))
    return TbProgram(tbprog.name, tbprog.collective, tbprog.proto, tbprog.inplace, tbprog.instances, tuple(gpus),
                     tbprog.sizes, tbprog.source)


def _with_nops(tbs: tuple[LTb, ...]) -> tuple[LTb, ...]:
    """insert_nops on one GPU where some step waits on several steps, all its steps at once (numpy): a step of k > 1
    waits takes k - 1 nops before it, which carry its waits 2..k in order; it keeps the first one."""
    lengths = [len(tb.types) for tb in tbs]
    total = sum(lengths)
    counts = np.fromiter(map(len, chain.from_iterable(tb.deps for tb in tbs)), dtype=np.int64, count=total)
    ends = np.cumsum(np.maximum(counts, 1))  # per step, + 1: its new place on the GPU (its nops come just before)
    first = np.zeros(len(tbs) + 1, dtype=np.int64)
    np.cumsum(lengths, out=first[1:])
    new_first = np.concatenate([[0], ends])[first]  # per threadblock, + 1: its first new place
    tb_of = np.repeat(np.arange(len(tbs)), lengths)
    local = (ends - 1 - new_first[tb_of]).tolist()  # per step: its new index in its threadblock
    # New index of every old step of a threadblock with nops (None: its steps keep their indices); the waits renamed
    # with it one at a time, so that a wait names the same step as before whatever it names
    several = np.concatenate([[0], np.cumsum(counts > 1)])[first]  # per threadblock, + 1: steps with nops before
    moved: list[list[int] | None] = [local[at:end] if more else None for at, end, more in zip(
        first[:-1].tolist(), first[1:].tolist(), (several[1:] > several[:-1]).tolist(), strict=True)]
    pairs = tuple(chain.from_iterable(chain.from_iterable(tb.deps for tb in tbs)))
    renamed = [(a, b) if moved[a] is None else (a, moved[a][b]) for a, b in pairs]  # type: ignore[index]
    # the place of each wait: wait 1 on the step itself, wait i > 1 on the (i - 1)-th of its nops
    owner = np.repeat(np.arange(total), counts)
    nth = np.arange(len(pairs)) - (np.cumsum(counts) - counts)[owner]
    places = np.where(nth == 0, ends[owner] - 1, ends[owner] - 1 - counts[owner] + nth).tolist()
    size = int(ends[-1]) if total else 0
    deps: list[Waits] = [()] * size
    for at, dep in zip(places, renamed, strict=True):
        deps[at] = (dep,)
    new_lengths = np.diff(new_first)
    hasdeps = np.zeros(size, dtype=bool)
    if renamed:
        a, b = np.array(renamed, dtype=np.int64).T
        ok = (b >= 0) & (b < new_lengths[a])
        hasdeps[new_first[:-1][a[ok]] + b[ok]] = True
    is_step = np.zeros(size, dtype=bool)
    is_step[ends - 1] = True
    columns = []
    for name, nop in (("types", NOP), ("srcbufs", "i"), ("srcoffs", -1), ("dstbufs", "o"), ("dstoffs", -1),
                      ("cnts", 0), ("lines", None)):
        column = np.repeat(np.fromiter(chain.from_iterable(map(attrgetter(name), tbs)), dtype=object, count=total),
                           np.maximum(counts, 1))
        if nop is not None:
            column[~is_step] = nop
        columns.append(column.tolist())
    columns.insert(6, deps)
    columns.insert(7, hasdeps.tolist())
    bounds = list(zip(new_first[:-1].tolist(), new_first[1:].tolist(), strict=True))
    return tuple(LTb(tb.send, tb.recv, tb.chan, *(tuple(column[at:end]) for column in columns))
                 for tb, (at, end) in zip(tbs, bounds, strict=True))


# Step is a frozen dataclass with slots: its __init__ sets every field through object.__setattr__, which costs
# about three times as much as storing into the slots directly. The IR has one Step per step (millions at 1024
# ranks), so lower_to_ir fills the slots itself: the same object, made the cheaper way (tests/compiler checks
# that it equals the one Step(...) makes).
_STEP_SLOTS = tuple(Step.__dict__[f.name].__set__ for f in fields(Step))


def step_of_fields(s: int, type: str, srcbuf: str, srcoff: int, dstbuf: str, dstoff: int, cnt: int, depid: int,
                   deps: int, hasdep: bool) -> Step:
    """Step(s, type, ..., hasdep), without the frozen dataclass's __init__."""
    step = object.__new__(Step)
    f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 = _STEP_SLOTS
    f0(step, s)
    f1(step, type)
    f2(step, srcbuf)
    f3(step, srcoff)
    f4(step, dstbuf)
    f5(step, dstoff)
    f6(step, cnt)
    f7(step, depid)
    f8(step, deps)
    f9(step, hasdep)
    return step


def lower_to_ir(tbprog: TbProgram) -> Algo:
    """The MSCCL-IR `Algo` (nops inserted first: every step has at most one dependency). The IR's step table
    (collsynth.ir.table, for the checks that follow) is made here from the same columns the steps are made from,
    and kept with the IR; where a column holds a value the table refuses (not an integer), it is not kept, and
    the checks read the IR's steps themselves, as for any IR."""
    gpus, gpu_columns = [], []
    for rank, tbs in enumerate(tbprog.gpus):
        columns = _gpu_columns(tbs)
        steps, at = _steps_of_columns(columns), 0
        threadblocks = []
        for t, tb in enumerate(tbs):
            n = len(tb.types)
            threadblocks.append(Threadblock(t, tb.send, tb.recv, tb.chan, tuple(steps[at:at + n])))
            at += n
        i_chunks, o_chunks, s_chunks = tbprog.sizes[rank]
        gpus.append(Gpu(rank, i_chunks, o_chunks, s_chunks, tuple(threadblocks)))
        gpu_columns.append(columns)
    meta = (("compiler", "collsynth"), ("program", tbprog.name), ("instances", str(tbprog.instances)),
            ("collective", collective_json(tbprog.collective)))
    ir = Algo(tbprog.name, coll_spelling(tbprog.collective.name), tbprog.proto, tbprog.nchannels,
              tbprog.nchunksperloop, len(gpus), tbprog.inplace, tuple(gpus), meta=meta)
    try:
        table = table_of(len(gpus), map(_table_columns, tbprog.gpus, gpu_columns))
    except (TypeError, ValueError, OverflowError):  # as step_table(ir) would raise: no table kept
        return ir
    keep_table(ir, table)
    return ir


def collective_json(collective: Collective) -> str:
    """`json.dumps(collective.to_dict())`, compact, without the list to_dict makes of every placement (a million at
    1024 ranks): json writes each placement tuple as that list (tests/compiler checks that the text is the same)."""
    data = replace(collective, inputs=(), outputs=()).to_dict()
    data["inputs"], data["outputs"] = collective.inputs, collective.outputs
    return json.dumps(data, separators=(",", ":"))


# One GPU's steps as columns: (threadblocks, their step counts, STEP_FIELDS -> that field of every step in
# (tb, step) order, materialized only where it is computed here: depid and deps).
_GpuColumns = tuple[Sequence[LTb], list[int], dict[str, Callable[[], Iterable[object]]]]


def _gpu_columns(tbs: Sequence[LTb]) -> _GpuColumns:
    lengths = [len(tb.types) for tb in tbs]
    n = sum(lengths)
    waits = list(chain.from_iterable(tb.deps for tb in tbs))
    if n and max(map(len, waits)) > 1:
        raise ValueError("lower_to_ir needs insert_nops first: a step has several dependencies")
    # a step's first wait, or (-1, -1): its waits + ((-1, -1),), item 0; then split into depid and deps
    depids, deps = zip(*map(_FIRST, map(add, waits, repeat(_NO_WAIT, n))), strict=True) if n else ((), ())

    def column(name: str) -> Callable[[], Iterable[object]]:
        return lambda: chain.from_iterable(map(attrgetter(name), tbs))

    return tbs, lengths, {
        "s": lambda: chain.from_iterable(map(range, lengths)), "type": column("types"), "srcbuf": column("srcbufs"),
        "srcoff": column("srcoffs"), "dstbuf": column("dstbufs"), "dstoff": column("dstoffs"), "cnt": column("cnts"),
        "depid": lambda: depids, "deps": lambda: deps, "hasdep": column("hasdeps")}


def _table_columns(tbs: Sequence[LTb], columns: _GpuColumns) -> GpuColumns:
    """A GPU's columns for `table_of`: each field's values as `_steps_of_columns` stores them into its Steps (so
    the table equals the one `step_table` reads back from those Steps; tests/compiler checks it)."""
    _, lengths, fields_of = columns
    rows = [(t, tb.send, tb.recv, tb.chan, n) for t, (tb, n) in enumerate(zip(tbs, lengths, strict=True))]
    return rows, {name: fields_of[name]() for name in STEP_FIELDS}, sum(lengths)


def _steps_of_columns(columns: _GpuColumns) -> list[Step]:
    """The IR steps of one GPU's threadblocks, one after another, made a field at a time from their columns: each
    field of every step is stored by one `map` that runs in C (no Python call per step, a few per GPU: the
    tuner's small IRs have many short threadblocks); one GPU's steps stay in cache meanwhile. The same steps as
    `step_of_fields` per step."""
    _, lengths, fields_of = columns
    steps = list(map(object.__new__, repeat(Step, sum(lengths))))
    for store, name in zip(_STEP_SLOTS, STEP_FIELDS, strict=True):
        deque(map(store, steps, fields_of[name]()), maxlen=0)
    return steps


_FIRST, _SECOND = itemgetter(0), itemgetter(1)
_NO_WAIT = ((-1, -1),)  # depid, deps of a step that waits for nothing


def step_lines(tbprog: TbProgram) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The DSL line of every step (per GPU, per threadblock), for messages about the IR."""
    return tuple(tuple(tb.lines for tb in tbs) for tbs in tbprog.gpus)
