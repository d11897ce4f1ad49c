"""The CPU reference interpreter: runs an IR with MSCCL semantics on numpy buffers and checks the result.

Semantics (the MSCCL runtime's, see collsynth/emit/msccl_xml.py for the sources):
* every rank has an input, output and scratch buffer of chunks (layout.py: sizes, in-place aliasing);
* one FIFO connection per (sender, receiver, channel); a receive takes the oldest message on its
  connection and must expect the same number of chunks that was sent;
* each threadblock runs its steps in order; a step with a dependency (depid, deps) waits until
  threadblock `depid` of its rank has published step >= `deps`; a threadblock publishes the number of
  each finished non-nop step marked hasdep (a nop only waits);
* a reducing step combines, element by element and in one operation, the received value and the local
  operand (`received OP local`; `re`: dst OP src) with the run's reduction op (sum, prod, max, min, as
  NCCL's redop: MSCCL-IR does not name it), so the order of operations is the order of the steps. Half
  types are computed in float32 and rounded once per step, int32 sum/prod wrap (numerics.py); this is
  the rule the CUDA kernel and its numpy model (cuda/emulate.py) follow, so all three agree bit for bit.
  Generated inputs make every reduction exact (layout.make_inputs), so the postcondition is checked
  exactly; bfloat16 buffers hold uint16 bits.

Scheduling is event driven: a threadblock runs until it blocks, registering what it waits for (a
message on one connection, room on one connection when `fifo_capacity` is set, a flag of one
threadblock); whatever provides it puts the threadblock back on the ready queue. When the queue is
empty and work is left, that is a deadlock, reported with every stuck threadblock and what it waits for.
Every chunk carries a written bit (input written, output and scratch not); reading an unwritten chunk
stops the run and names the step. A send proceeds only while fewer than `fifo_capacity` messages are in
flight on its connection: by default the runtime's FIFO_SLOTS (NCCL_STEPS = 8, collsynth.core.limits), so a
program that relies on more buffering than the runtime has is a deadlock here too; `fifo_capacity=None`
makes connections unbounded. Whether a program deadlocks does not depend on the scheduling order (each
connection has one sender and one receiver, and every wait is monotone), so one run decides it.

Tiles: every step reads and writes the same slice of each chunk it names, so MSCCL's loop over tiles
computes each slice independently; the interpreter therefore processes all tiles in one vectorized pass
(`tile_by_tile=True` runs the loop literally, one tile after another, with fresh connections, flags and
written bits per tile, as MSCCL does; both give the same buffers).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from collsynth.collectives.spec import Collective, display_name
from collsynth.core.limits import FIFO_SLOTS
from collsynth.ir import (
    COPY,
    NOP,
    RECEIVING_TYPES,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
    SENDING_TYPES,
    Algo,
)
from collsynth.ir.validate import LOCAL_DST_TYPES, LOCAL_SRC_TYPES, validate
from collsynth.runtime.check import check_outputs
from collsynth.runtime.layout import (
    BufferLayout,
    ExecutionError,
    coerce_inputs,
    collective_for,
    input_nbytes,
    layout_problem,
    make_inputs,
    plan_layout,
)
from collsynth.runtime.numerics import NumberFormat, number_format, reducer, reducer_into, reduction_op, to_storage
from collsynth.runtime.result import (
    DEADLOCK,
    LAYOUT,
    LEFTOVER,
    MESSAGE_SIZE,
    MISMATCH,
    UNWRITTEN_READ,
    ExecutionResult,
)

MAX_REPORTED = 20  # stuck threadblocks / leftover messages named in `details`


def execute_cpu(ir: Algo, nbytes: int | None = None, dtype: str = "float32", seed: int = 0,
                collective: Collective | None = None, inputs: Sequence[np.ndarray] | None = None, *,
                op: str = "sum", root: int | None = None, postcondition: bool = True, tile_bytes: int | None = None,
                tile_by_tile: bool = False, fifo_capacity: int | None = FIFO_SLOTS) -> ExecutionResult:
    """Run `ir` on every rank's buffers and check the collective's postcondition.

    nbytes: per-rank input buffer size (default: 1024 elements per chunk); dtype: float32, float16,
    bfloat16, float64 or int32 (aliases such as bf16, fp16 too); op: the reduction operator, sum, prod,
    max or min; inputs: per-rank input buffers (flat or (chunks, elems)) instead of random ones (bfloat16:
    float numbers, rounded to bfloat16, or uint16 bits); collective: the postcondition (default: rebuilt
    from the IR, see layout.collective_for); root: the root of a rooted collective if it cannot be
    inferred; postcondition=False only runs the program; fifo_capacity: messages one connection holds
    (default the runtime's FIFO_SLOTS; None: unbounded).
    Raises IRError for a malformed IR and ExecutionError for an impossible request; everything the
    program does wrong is a FAIL result."""
    validate(ir, max_steps_per_tb=None)  # any target's IR runs; the step limit is the loader's
    fmt = number_format(dtype)
    op = reduction_op(op)
    np_dtype = fmt.storage
    if fifo_capacity is not None and fifo_capacity < 1:
        raise ExecutionError(f"fifo_capacity={fifo_capacity}: a connection must hold at least one message")
    try:
        coll = collective_for(ir, collective, root)
    except ExecutionError:
        if postcondition:
            raise
        coll = None
    if inputs is not None:
        inputs = [to_storage(fmt, x) for x in inputs]
        if nbytes is None:
            nbytes = input_nbytes(inputs, np_dtype)
    layout = plan_layout(ir, coll, nbytes, fmt, tile_bytes)
    start_inputs = coerce_inputs(layout, np_dtype, inputs) if inputs is not None else make_inputs(layout, fmt, seed,
                                                                                                 op)
    report = _Report(ir, coll, layout, fmt, op, start_inputs)
    problem = layout_problem(ir, layout)
    if problem:
        return report.result(False, LAYOUT, problem)
    memory = _Memory(layout, start_inputs)
    started = time.perf_counter()
    try:
        steps_run = 0
        written: list[list[np.ndarray]] = []
        for lo, hi in _tile_ranges(layout, tile_by_tile):
            programs, labels, written = _compile(ir, memory, lo, hi, fmt, op)
            steps_run += _run(ir, programs, labels, fifo_capacity)
    except _Failure as failure:
        report.seconds = time.perf_counter() - started
        report.outputs = memory.outputs()
        return report.result(False, failure.kind, failure.message, failure.details)
    report.seconds = time.perf_counter() - started
    report.outputs = memory.outputs()
    report.steps_run = steps_run
    if not postcondition or coll is None:
        return report.result(True, None, f"ran {steps_run} steps to completion (postcondition not checked)")
    outcome = check_outputs(coll, start_inputs, [out.reshape(layout.output_chunks, -1) for out in report.outputs],
                            exact=inputs is None or not fmt.is_float, written=memory.output_written(written),
                            op=op, dtype=fmt)
    report.max_error = outcome.max_error
    if not outcome.passed:
        return report.result(False, MISMATCH, outcome.message, outcome.details)
    return report.result(True, None, outcome.message)


class _Failure(Exception):
    def __init__(self, kind: str, message: str, details: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.kind, self.message, self.details = kind, message, tuple(details)


class _Report:
    """Collects what the result needs while the run goes on."""

    def __init__(self, ir: Algo, coll: Collective | None, layout: BufferLayout, fmt: NumberFormat, op: str,
                 inputs: list[np.ndarray]) -> None:
        self.ir, self.coll, self.layout, self.fmt, self.op, self.inputs = ir, coll, layout, fmt, op, inputs
        self.seconds = 0.0
        self.outputs: tuple[np.ndarray, ...] = ()
        self.steps_run = 0
        self.max_error = 0.0

    def result(self, passed: bool, failure: str | None, message: str, details: Sequence[str] = ()) -> ExecutionResult:
        layout = self.layout
        name = display_name(self.coll.name) if self.coll else self.ir.collective
        return ExecutionResult(
            passed=passed, message=message, collective=name, ngpus=self.ir.ngpus,
            nbytes=layout.input_chunks * layout.chunk_elems * self.fmt.itemsize, dtype=self.fmt.name,
            backend="cpu", seconds=self.seconds, outputs=self.outputs,
            inputs=tuple(x.reshape(-1) for x in self.inputs), failure=failure, details=tuple(details),
            chunk_elems=layout.chunk_elems, tiles=layout.tiles, steps_run=self.steps_run, max_error=self.max_error,
            op=self.op)


# --- memory -------------------------------------------------------------------------------------------

class _Memory:
    """Every rank's buffers. `places[rank][buf] = (storage index, first chunk, chunks)`: in-place IRs map
    input and output onto one storage array."""

    def __init__(self, layout: BufferLayout, inputs: list[np.ndarray]) -> None:
        self.layout = layout
        dtype = inputs[0].dtype
        elems = layout.chunk_elems
        self.storages: list[list[np.ndarray]] = []
        self.places: list[dict[str, tuple[int, int, int]]] = []
        self.initially_written: list[list[np.ndarray]] = []
        for rank, data in enumerate(inputs):
            scratch = np.zeros((layout.scratch_chunks[rank], elems), dtype=dtype)
            if layout.inplace:
                shared = np.zeros((layout.storage_chunks, elems), dtype=dtype)
                start = layout.input_offset(rank)
                shared[start:start + layout.input_chunks] = data
                mask = np.zeros(layout.storage_chunks, dtype=bool)
                mask[start:start + layout.input_chunks] = True
                self.storages.append([shared, scratch])
                self.initially_written.append([mask, np.zeros(len(scratch), dtype=bool)])
                self.places.append({"i": (0, start, layout.input_chunks),
                                    "o": (0, layout.output_offset(rank), layout.output_chunks),
                                    "s": (1, 0, len(scratch))})
            else:
                output = np.zeros((layout.output_chunks, elems), dtype=dtype)
                self.storages.append([data.copy(), output, scratch])
                self.initially_written.append([np.ones(len(data), dtype=bool), np.zeros(len(output), dtype=bool),
                                               np.zeros(len(scratch), dtype=bool)])
                self.places.append({"i": (0, 0, layout.input_chunks), "o": (1, 0, layout.output_chunks),
                                    "s": (2, 0, len(scratch))})

    def outputs(self) -> tuple[np.ndarray, ...]:
        result = []
        for rank, place in enumerate(self.places):
            index, start, count = place["o"]
            result.append(self.storages[rank][index][start:start + count].reshape(-1))  # the run is over: no copy
        return tuple(result)

    def output_written(self, written: list[list[np.ndarray]]) -> list[np.ndarray]:
        """Per rank, which output chunks hold data (from the last tile's written bits)."""
        result = []
        for rank, place in enumerate(self.places):
            index, start, count = place["o"]
            result.append(written[rank][index][start:start + count] if written else np.zeros(count, dtype=bool))
        return result


def _tile_ranges(layout: BufferLayout, tile_by_tile: bool) -> list[tuple[int, int]]:
    if not tile_by_tile:
        return [(0, layout.chunk_elems)]
    size = layout.tile_elems
    return [(lo, min(lo + size, layout.chunk_elems)) for lo in range(0, layout.chunk_elems, size)]


# --- compiling steps into operations on buffer views -----------------------------------------------------

class _Op:
    """One step bound to the buffer views it touches (slots: this runs in the inner loop)."""

    __slots__ = ("type", "s", "cnt", "label", "src", "src_written", "dst", "dst_written", "recv_key", "send_key",
                 "dep_tb", "dep_step", "publishes", "reduce", "reduce_into", "reduce_verb")
    type: str
    s: int
    cnt: int
    label: str
    src: Any
    src_written: Any
    dst: Any
    dst_written: Any
    recv_key: tuple[int, int, int] | None
    send_key: tuple[int, int, int] | None
    dep_tb: int
    dep_step: int
    publishes: bool
    reduce: Callable[[np.ndarray, np.ndarray], np.ndarray]
    reduce_into: Callable[[np.ndarray, np.ndarray, np.ndarray], None]
    reduce_verb: str


def _compile(ir: Algo, memory: _Memory, lo: int, hi: int, fmt: NumberFormat, reduce_op: str,
             ) -> tuple[list[list[_Op]], list[str], list[list[np.ndarray]]]:
    """Per global threadblock, its steps bound to views of columns [lo, hi) of every chunk; reducing steps
    combine with `reduce(received, local)` (or `reduce_into(received, local, out)`) of the format and op."""
    reduce, reduce_into = reducer(fmt, reduce_op), reducer_into(fmt, reduce_op)
    verb = _REDUCE_VERBS[reduce_op]
    first_tb = [0]
    for gpu in ir.gpus:
        first_tb.append(first_tb[-1] + len(gpu.tbs))
    programs: list[list[_Op]] = []
    labels: list[str] = []
    written = [[mask.copy() for mask in masks] for masks in memory.initially_written]
    for gpu in ir.gpus:
        rank = gpu.id
        views = [storage[:, lo:hi] for storage in memory.storages[rank]]
        for tb in gpu.tbs:
            labels.append(f"gpu {rank} tb {tb.id}")
            program = []
            for step in tb.steps:
                op = _Op()
                op.type, op.s, op.cnt = step.type, step.s, step.cnt
                op.label = f"gpu {rank} tb {tb.id} step {step.s} ({step.type})"
                op.src = op.src_written = op.dst = op.dst_written = None
                if step.type in LOCAL_SRC_TYPES:
                    op.src, op.src_written = _bind(memory, views, written[rank], rank, step.srcbuf, step.srcoff,
                                                   step.cnt, op.label)
                if step.type in LOCAL_DST_TYPES:
                    op.dst, op.dst_written = _bind(memory, views, written[rank], rank, step.dstbuf, step.dstoff,
                                                   step.cnt, op.label)
                op.recv_key = (tb.recv, rank, tb.chan) if step.type in RECEIVING_TYPES else None
                op.send_key = (rank, tb.send, tb.chan) if step.type in SENDING_TYPES else None
                op.dep_tb = first_tb[rank] + step.depid if step.depid >= 0 else -1
                op.dep_step = step.deps
                op.publishes = step.hasdep and step.type != NOP
                op.reduce, op.reduce_into, op.reduce_verb = reduce, reduce_into, verb
                program.append(op)
            programs.append(program)
    return programs, labels, written


def _bind(memory: _Memory, views: list[np.ndarray], written: list[np.ndarray], rank: int, buf: str, offset: int,
          count: int, label: str) -> tuple[np.ndarray, np.ndarray]:
    index, start, size = memory.places[rank][buf]
    if offset + count > size:
        raise _Failure(LAYOUT, f"{label} addresses {buf}[{offset}:{offset + count}] but rank {rank}'s "
                       f"{_BUFFER_NAMES[buf]} buffer holds {size} chunks for this collective")
    return views[index][start + offset:start + offset + count], written[index][start + offset:start + offset + count]


_BUFFER_NAMES = {"i": "input", "o": "output", "s": "scratch"}
_REDUCE_VERBS = {"sum": "adds into", "prod": "multiplies into", "max": "takes the maximum into",
                 "min": "takes the minimum into"}


# --- running -----------------------------------------------------------------------------------------

def _run(ir: Algo, programs: list[list[_Op]], labels: list[str], capacity: int | None) -> int:
    """Run every threadblock to completion; return the number of steps run or raise _Failure."""
    count = len(programs)
    pcs = [0] * count
    flags = [-1] * count
    fifos: dict[tuple[int, int, int], deque[tuple[np.ndarray, str]]] = {}
    recv_waiter: dict[tuple[int, int, int], int] = {}
    space_waiter: dict[tuple[int, int, int], int] = {}
    flag_waiters: dict[int, list[int]] = {}
    ready = deque(range(count))
    steps_run = 0
    while ready:
        tb = ready.popleft()
        program = programs[tb]
        pc, end = pcs[tb], len(program)
        while pc < end:
            op = program[pc]
            if op.dep_tb >= 0 and flags[op.dep_tb] < op.dep_step:
                flag_waiters.setdefault(op.dep_tb, []).append(tb)
                break
            queue = None
            if op.recv_key is not None:
                queue = fifos.get(op.recv_key)
                if not queue:
                    recv_waiter[op.recv_key] = tb
                    break
            if op.send_key is not None and capacity is not None:
                out_queue = fifos.get(op.send_key)
                if out_queue is not None and len(out_queue) >= capacity:
                    space_waiter[op.send_key] = tb
                    break
            message = None
            if queue is not None:
                message, origin = queue.popleft()
                if message.shape[0] != op.cnt:
                    raise _Failure(MESSAGE_SIZE, f"{op.label} expects {op.cnt} chunk(s) but the oldest message on its "
                                   f"connection has {message.shape[0]} (sent by {origin})")
                waiter = space_waiter.pop(op.recv_key, None) if op.recv_key is not None else None
                if waiter is not None:
                    ready.append(waiter)
            sent = _apply(op, message)
            if op.send_key is not None:
                assert sent is not None  # every sending step type returns its message
                fifos.setdefault(op.send_key, deque()).append((sent, op.label))
                waiter = recv_waiter.pop(op.send_key, None)
                if waiter is not None:
                    ready.append(waiter)
            pc += 1
            steps_run += 1
            if op.publishes:
                flags[tb] = op.s
                waiters = flag_waiters.pop(tb, None)
                if waiters:
                    ready.extend(waiters)
        pcs[tb] = pc
    stuck = [tb for tb in range(count) if pcs[tb] < len(programs[tb])]
    if stuck:
        lines = [_why_stuck(programs, labels, pcs, flags, fifos, capacity, tb) for tb in stuck]
        fifo = "unbounded connections" if capacity is None else f"connections of {capacity} message slot(s)"
        raise _Failure(DEADLOCK, f"{len(stuck)} threadblock(s) can never finish with {fifo}; {lines[0]}",
                       lines[:MAX_REPORTED])
    left = [(key, queue) for key, queue in fifos.items() if queue]
    if left:
        lines = [f"rank {src} -> rank {dst} channel {chan}: {len(queue)} message(s) never received, first sent by "
                 f"{queue[0][1]}" for (src, dst, chan), queue in sorted(left)]
        raise _Failure(LEFTOVER, f"messages were sent that no step receives; {lines[0]}", lines[:MAX_REPORTED])
    return steps_run


def _apply(op: _Op, message: Any) -> np.ndarray | None:
    """Do one step's data movement; return the message it sends (None if it sends nothing). `message` is the
    received array for receiving step types (the runner checked it arrived), None for the others."""
    kind = op.type
    if op.src_written is not None and not op.src_written.all():
        raise _Failure(UNWRITTEN_READ, _unwritten(op, op.src_written, "reads"))
    if kind == SEND:
        return op.src.copy()
    if kind in (RECV, RECV_COPY_SEND):
        op.dst[...] = message
        op.dst_written[...] = True
        return message if kind == RECV_COPY_SEND else None
    if kind == RECV_REDUCE_SEND:
        return op.reduce(message, op.src)
    if kind == RECV_REDUCE_COPY:
        op.reduce_into(message, op.src, op.dst)
        op.dst_written[...] = True
        return None
    if kind == RECV_REDUCE_COPY_SEND:
        total = op.reduce(message, op.src)
        op.dst[...] = total
        op.dst_written[...] = True
        return total
    if kind == COPY:
        op.dst[...] = op.src
        op.dst_written[...] = True
        return None
    if kind == REDUCE:
        if not op.dst_written.all():
            raise _Failure(UNWRITTEN_READ, _unwritten(op, op.dst_written, op.reduce_verb))
        op.reduce_into(op.dst, op.src, op.dst)
        return None
    return None  # nop: only waits


def _unwritten(op: _Op, written: np.ndarray, verb: str) -> str:
    missing = int(np.flatnonzero(~written)[0])
    return (f"{op.label} {verb} chunk {missing} of its {op.cnt}-chunk operand, which no step has written "
            "(output and scratch start empty)")


def _why_stuck(programs: list[list[_Op]], labels: list[str], pcs: list[int], flags: list[int],
               fifos: dict[tuple[int, int, int], deque], capacity: int | None, tb: int) -> str:
    op = programs[tb][pcs[tb]]
    if op.dep_tb >= 0 and flags[op.dep_tb] < op.dep_step:
        other = op.dep_tb
        at = f"step {pcs[other]}" if pcs[other] < len(programs[other]) else "the end"
        return (f"{op.label} waits for {labels[other]} to finish step {op.dep_step} (it is stuck at {at}, last "
                f"published step {flags[other]})")
    if op.recv_key is not None and not fifos.get(op.recv_key):
        src, _, chan = op.recv_key
        return f"{op.label} waits for a message from rank {src} on channel {chan}; none ever arrives"
    assert op.send_key is not None  # not waiting for a dependency or a message: waiting for room to send
    src, dst, chan = op.send_key
    return f"{op.label} waits for room on the connection to rank {dst} channel {chan} ({capacity} message(s) in flight)"
