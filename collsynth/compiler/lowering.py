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
from dataclasses import dataclass, fields
from functools import partial
from itertools import chain, compress, repeat
from operator import add, attrgetter, itemgetter
from typing import NamedTuple

from collsynth.collectives import Collective
from collsynth.compiler.dag import Instr
from collsynth.compiler.deps import Dep, Dependencies, Waits
from collsynth.compiler.placement import Placement, StepRef
from collsynth.ir import (
    COPY,
    NOP,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
    Algo,
    Gpu,
    Step,
    Threadblock,
    coll_spelling,
)
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


@dataclass(frozen=True)
class LTb:
    send: int
    recv: int
    chan: int
    steps: tuple[LStep, ...]


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
    instrs, runs_at = placement.dag.instrs, placement.at if copies > 1 else ()  # (made per call: only if used)
    interleaved = program.options.interleaved_replication
    per_instance = 1 + max((tb.chan for tbs in placement.tbs for tb in tbs), default=0)
    sizes = {INPUT: buffer_size(coll, INPUT), OUTPUT: buffer_size(coll, OUTPUT)}
    cross = cross_instance_waits(placement, copies, interleaved)
    gpus, gpu_sizes = [], []
    for rank, (tbs, rank_waits) in enumerate(zip(placement.tbs, dependencies.waits, strict=True)):
        scratch = program.scratch_sizes(rank)
        base, at = {}, 0
        for name, size in scratch.items():
            base[name] = at
            at += size * copies

        layout = {INPUT: ("i", 0, sizes[INPUT]), OUTPUT: ("o", 0, sizes[OUTPUT])}  # buffer -> IR buffer, start, size
        layout.update((name, ("s", base[name], size)) for name, size in scratch.items())
        # Threadblocks are numbered by (send, recv, chan), then by their order in the placement: number them
        # first, so every wait names its final threadblock as it is made.
        keys = sorted(((tb.send, tb.recv, tb.chan + k * per_instance), t * copies + k)
                      for t, tb in enumerate(tbs) for k in range(copies))
        new_id = [0] * len(keys)
        for new, (_, old) in enumerate(keys):
            new_id[old] = new
        made: list[LTb] = [None] * len(keys)  # type: ignore[list-item]
        for t, (tb, tb_waits) in enumerate(zip(tbs, rank_waits, strict=True)):
            if copies == 1:  # the usual case: every step as it is, on its buffer's IR buffer
                made[new_id[t]] = LTb(tb.send, tb.recv, tb.chan,
                                      _one_instance(tb.instrs, tb_waits, instrs, layout, new_id))
                continue
            steps_of = _many_instances(tb.instrs, tb_waits, instrs, layout, new_id, copies, interleaved, cross,
                                       runs_at)
            for k, steps in enumerate(steps_of):
                made[new_id[t * copies + k]] = LTb(tb.send, tb.recv, tb.chan + k * per_instance, steps)
        gpus.append(tuple(made))
        gpu_sizes.append((coll.input_chunks * copies, coll.output_chunks * copies, at))
    return TbProgram(program.name, instance_collective(coll, copies), program.protocol, coll.inplace, copies,
                     tuple(gpus), tuple(gpu_sizes), placement.dag.source)


def _one_instance(members: tuple[int, ...], tb_waits: tuple[Waits, ...], instrs: tuple[Instr, ...],
                  layout: dict[str, tuple[str, int, int]], new_id: list[int]) -> tuple[LStep, ...]:
    """The steps of one threadblock when there is one instance (no other instance to wait for either)."""
    steps: list[LStep] = []
    append = steps.append
    for i, waits in zip(members, tb_waits, strict=True):
        ins = instrs[i]
        kind, _, src_buf, src_off, dst_buf, dst_off, cnt = ins[:7]  # one slice, not seven field lookups
        sb, sstart, _ = layout[src_buf]
        db, dstart, _ = layout[dst_buf]
        append(lstep_of_fields((kind, sb, sstart + src_off, db, dstart + dst_off, cnt,
                                tuple([(new_id[a], b) for a, b in waits]) if waits else (), False, ins[_INSTR_LINE])))
    return tuple(steps)


def _many_instances(members: tuple[int, ...], tb_waits: tuple[Waits, ...], instrs: tuple[Instr, ...],
                    layout: dict[str, tuple[str, int, int]], new_id: list[int], copies: int, interleaved: bool,
                    cross: dict[Access, tuple[Access, ...]], runs_at: tuple[StepRef, ...]) -> list[tuple[LStep, ...]]:
    """The steps of one threadblock's `copies` instances (see the module docstring), per instance."""
    # Instance k of a step reads and writes at (first offset) + k * (stride): each step's part is computed once,
    # and so are its own instance's waits as _uncovered reads them (the latest per threadblock, by threadblock:
    # threadblock dt of instance k is dt * copies + k, the same order for every k).
    parts = []
    for i, waits in zip(members, tb_waits, strict=True):
        ins = instrs[i]
        cnt = ins.cnt
        sb, sstart, ssize = layout[ins.src_buf]
        db, dstart, dsize = layout[ins.dst_buf]
        own: Waits | list[Dep] = waits
        if cross and len(waits) > 1:
            latest: dict[int, int] = {}
            for dt, ds in waits:
                if ds > latest.get(dt, -1):
                    latest[dt] = ds
            own = sorted(latest.items())
        if interleaved:
            parts.append((i, ins.kind, sb, sstart + ins.src_off * copies, cnt, db, dstart + ins.dst_off * copies, cnt,
                          cnt, waits, own, ins.line))
        else:
            parts.append((i, ins.kind, sb, sstart + ins.src_off, ssize, db, dstart + ins.dst_off, dsize, cnt, waits,
                          own, ins.line))
    instances = []
    for k in range(copies):
        if not cross:
            instances.append(tuple([lstep_of_fields((kind, sb, so + k * sstride, db, do + k * dstride, cnt,
                                                     tuple([(new_id[dt * copies + k], ds) for dt, ds in waits])
                                                     if waits else (), False, line))
                                    for _, kind, sb, so, sstride, db, do, dstride, cnt, waits, _, line in parts]))
            continue
        steps = []
        waited: dict[int, int] = {}  # threadblock -> latest step this threadblock already waited for
        for i, kind, sb, so, sstride, db, do, dstride, cnt, waits, own, line in parts:
            others = cross.get((i, k))
            if others is None:  # _uncovered of this instance's own waits, from their instance-free form
                kept = []
                for dt, ds in own:
                    t = dt * copies + k
                    if waited.get(t, -1) < ds:
                        kept.append((new_id[t], ds))
                        waited[t] = ds
                waits_to = tuple(kept)
            else:
                both = [(dt * copies + k, ds) for dt, ds in waits]
                both += [(runs_at[p].tb * copies + kp, runs_at[p].step) for p, kp in others]
                waits_to = tuple([(new_id[a], b) for a, b in _uncovered(both, waited)])
            steps.append(lstep_of_fields((kind, sb, so + k * sstride, db, do + k * dstride, cnt, waits_to, False,
                                          line)))
        instances.append(tuple(steps))
    return instances


def _uncovered(waits: list[Dep], waited: dict[int, int]) -> list[Dep]:
    """The latest wait per threadblock, less those an earlier step of the same threadblock covers."""
    latest: dict[int, int] = {}
    for t, s in waits:
        if s > latest.get(t, -1):
            latest[t] = s
    kept = []
    for t, s in sorted(latest.items()):
        if waited.get(t, -1) < s:
            kept.append((t, s))
            waited[t] = s
    return kept


# Which local slot each kind of step reads and writes (fused steps: the receive's slot; rrs stores nothing).
_READS_SRC = frozenset({SEND, COPY, REDUCE})
_READS_DST = frozenset({RECV_REDUCE_COPY, RECV_REDUCE_COPY_SEND, RECV_REDUCE_SEND, REDUCE})
_WRITES_DST = frozenset({RECV, RECV_COPY_SEND, RECV_REDUCE_COPY, RECV_REDUCE_COPY_SEND, COPY, REDUCE})

Access = tuple[int, int]  # (instr, instance)


def cross_instance_waits(placement: Placement, copies: int,
                         interleaved: bool = True) -> dict[Access, tuple[Access, ...]]:
    """For every (instr, instance) whose positions another instance touched before it, those (instr,
    instance)s: the last writer of a position it reads, the readers since the last write (else that
    write) of a position it writes. Only interleaved steps of more than one chunk can overlap other
    instances; without any (the usual case) this is empty at once."""
    instrs = placement.dag.instrs
    if copies == 1 or not interleaved or all(ins.cnt == 1 for ins in instrs):
        return {}
    # per (rank, buffer): the last writer and the readers since of every position, by position
    positions: dict[tuple[int, str], tuple[dict[int, Access], dict[int, list[Access]]]] = {}

    def of(rank: int, buf: str) -> tuple[dict[int, Access], dict[int, list[Access]]]:
        tables = positions.get((rank, buf))
        if tables is None:
            tables = positions[(rank, buf)] = ({}, {})
        return tables

    # A buffer that only one-chunk steps touch has instance k's parts at positions k (mod copies) alone: no
    # other instance touches them, so its positions are not traced.
    wide = {(ins.rank, buf) for ins in instrs if ins.cnt > 1 for buf in (ins.src_buf, ins.dst_buf)}
    waits: dict[Access, tuple[Access, ...]] = {}
    for i, ins in enumerate(instrs):  # a topological order: instrs that conflict come in program order
        kind, rank, cnt = ins.kind, ins.rank, ins.cnt
        src, dst = (rank, ins.src_buf), (rank, ins.dst_buf)
        reads = [(of(*src), ins.src_off * copies)] if kind in _READS_SRC and src in wide else []
        if kind in _READS_DST and dst in wide:
            reads.append((of(*dst), ins.dst_off * copies))
        written = of(*dst) if kind in _WRITES_DST and dst in wide else None
        if not reads and written is None:
            continue
        for k in range(copies):
            me = (i, k)
            found: list[Access] = []  # of other instances only (own instance: the DAG's dependencies)
            for (last_writer, readers), base in reads:
                first = base + k * cnt
                for pos in range(first, first + cnt):
                    w = last_writer.get(pos)
                    if w is not None and w[1] != k:
                        found.append(w)
                    rs = readers.get(pos)
                    if rs is None:
                        readers[pos] = [me]
                    else:
                        rs.append(me)
            if written is not None:
                last_writer, readers = written
                first = ins.dst_off * copies + k * cnt
                for pos in range(first, first + cnt):
                    rs = readers.pop(pos, None)
                    if rs:  # write after read; those readers already follow the last write
                        found += [a for a in rs if a[1] != k]
                    else:
                        w = last_writer.get(pos)
                        if w is not None and w[1] != k:
                            found.append(w)  # write after write
                    last_writer[pos] = me
            if found:
                waits[me] = tuple(sorted(set(found)))
    return waits


def insert_nops(tbprog: TbProgram) -> TbProgram:
    """A step waiting on several steps keeps one dependency; a nop before it carries each other one
    (MSCCL steps name a single dependency). Waited-on steps get hasdep."""
    gpus = []
    for tbs in tbprog.gpus:
        deps_of = [list(map(_DEPS, tb.steps)) for tb in tbs]
        if any(max(map(len, deps), default=0) > 1 for deps in deps_of):
            gpus.append(_with_nops(tbs))
            continue
        # No nop on this GPU (the usual case): every step keeps its index, only hasdep may change.
        waited: list[set[int]] = [set() for _ in tbs]  # per threadblock: its steps that others wait for
        for deps in deps_of:
            for t, s in chain.from_iterable(deps):
                waited[t].add(s)
        new_tbs = []
        for tb, mine in zip(tbs, waited, strict=True):
            flagged = list(compress(range(len(tb.steps)), map(_HASDEP, tb.steps)))
            wrong = mine.symmetric_difference(flagged)  # steps whose flag must flip
            if not wrong:
                new_tbs.append(tb)
                continue
            steps = list(tb.steps)
            for k in wrong:
                step = steps[k]
                steps[k] = lstep_of_fields((*step[:7], not step.hasdep, step.line))
            new_tbs.append(LTb(tb.send, tb.recv, tb.chan, tuple(steps)))
        gpus.append(tuple(new_tbs))
    return TbProgram(tbprog.name, tbprog.collective, tbprog.proto, tbprog.inplace, tbprog.instances, tuple(gpus),
                     tbprog.sizes, tbprog.source)


_DEPS, _HASDEP = attrgetter("deps"), attrgetter("hasdep")


def _with_nops(tbs: tuple[LTb, ...]) -> tuple[LTb, ...]:
    """insert_nops on one GPU where some step waits on several steps."""
    # New index of every old step, counting the nops inserted before it (None: none inserted).
    new_index: list[list[int] | None] = []
    for tb in tbs:
        if all(len(step.deps) < 2 for step in tb.steps):
            new_index.append(None)
            continue
        at, index = 0, []
        for step in tb.steps:
            at += max(len(step.deps) - 1, 0)
            index.append(at)
            at += 1
        new_index.append(index)

    def moved(t: int, s: int) -> Dep:
        index = new_index[t]
        return (t, s) if index is None else (t, index[s])

    waited: list[set[int]] = [set() for _ in tbs]  # per threadblock: its steps that others wait for
    for tb in tbs:
        for step in tb.steps:
            for t, s in step.deps:
                t, s = moved(t, s)
                waited[t].add(s)
    new_tbs = []
    for t, tb in enumerate(tbs):
        mine = waited[t]
        steps = []
        for step in tb.steps:
            deps = step.deps
            if deps:
                deps = tuple(moved(a, b) for a, b in deps)
                for dep in deps[1:]:
                    steps.append(LStep(NOP, "i", -1, "o", -1, 0, (dep,), False, step.line))
                deps = deps[:1]
            hasdep = len(steps) in mine
            steps.append(step if (deps == step.deps and hasdep == step.hasdep) else
                         lstep_of_fields((*step[:6], deps, hasdep, step.line)))
        new_tbs.append(LTb(tb.send, tb.recv, tb.chan, tuple(steps)))
    return tuple(new_tbs)


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
    """The MSCCL-IR `Algo` (nops inserted first: every step has at most one dependency)."""
    gpus = []
    for rank, tbs in enumerate(tbprog.gpus):
        threadblocks = [Threadblock(t, tb.send, tb.recv, tb.chan, steps_of(tb.steps)) for t, tb in enumerate(tbs)]
        i_chunks, o_chunks, s_chunks = tbprog.sizes[rank]
        gpus.append(Gpu(rank, i_chunks, o_chunks, s_chunks, tuple(threadblocks)))
    meta = (("compiler", "collsynth"), ("program", tbprog.name), ("instances", str(tbprog.instances)),
            ("collective", json.dumps(tbprog.collective.to_dict(), separators=(",", ":"))))
    return Algo(tbprog.name, coll_spelling(tbprog.collective.name), tbprog.proto, tbprog.nchannels,
                tbprog.nchunksperloop, len(gpus), tbprog.inplace, tuple(gpus), meta=meta)


def steps_of(lsteps: tuple[LStep, ...]) -> tuple[Step, ...]:
    """One threadblock's IR steps, made a field at a time: each field of every step is stored by one `map`
    that runs in C (no Python call per step); one threadblock's steps stay in cache meanwhile. The same
    steps as `step_of_fields` per step."""
    n = len(lsteps)
    if n == 0:
        return ()
    types, srcbufs, srcoffs, dstbufs, dstoffs, cnts, waits, hasdeps, _ = zip(*lsteps, strict=True)
    if max(map(len, waits)) > 1:
        raise ValueError("lower_to_ir needs insert_nops first: a step has several dependencies")
    # a step's first wait, or (-1, -1): its waits + ((-1, -1),), item 0; then split into depid and deps
    depids, deps = zip(*map(_FIRST, map(add, waits, repeat(_NO_WAIT, n))), strict=True)
    steps = list(map(object.__new__, repeat(Step, n)))
    for store, column in zip(_STEP_SLOTS, (range(n), types, srcbufs, srcoffs, dstbufs, dstoffs, cnts, depids, deps,
                                           hasdeps), strict=True):
        deque(map(store, steps, column), maxlen=0)
    return tuple(steps)


_FIRST = itemgetter(0)
_NO_WAIT = ((-1, -1),)  # depid, deps of a step that waits for nothing


def step_lines(tbprog: TbProgram) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """The DSL line of every step (per GPU, per threadblock), for messages about the IR."""
    return tuple(tuple(tuple(map(_LINE, tb.steps)) for tb in tbs) for tbs in tbprog.gpus)


_LINE = attrgetter("line")
