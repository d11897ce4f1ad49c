"""A numpy model of the CUDA interpreter kernel: it executes a FlatProgram the way the kernel does.

Same arrays, same tile loop, same bounded FIFO slots, same head/tail and progress counters, same
reduction arithmetic (collsynth.runtime.numerics, shared with the CPU interpreter); blocks are scheduled
cooperatively instead of in parallel (a block runs until it would spin). It is the CPU-side check of the
flattening and of the kernel's protocol (tests compare it with the CPU reference interpreter bit for bit,
for every dtype and reduction op).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collsynth.core.enums import StepType
from collsynth.core.steps import RECEIVING_TYPES, SENDING_TYPES
from collsynth.runtime.cuda.flatten import (
    BLOCK_FIRST_STEP,
    BLOCK_NSTEPS,
    BLOCK_RECV_CONN,
    BLOCK_SEND_CONN,
    CONN_SLOT_BASE,
    STATE_DONE,
    STATE_STUCK,
    STATUS_COLS,
    STEP_CNT,
    STEP_CODES,
    STEP_DEP_BLOCK,
    STEP_DEP_NSTEPS,
    STEP_DEP_STEP,
    STEP_DST,
    STEP_PUBLISH,
    STEP_SRC,
    STEP_TYPE,
    WAIT_DEP,
    WAIT_RECV,
    WAIT_SEND,
    CudaBackendError,
    FlatProgram,
)
from collsynth.runtime.cuda.numerics import ElementType
from collsynth.runtime.numerics import reducer


class DeadlockError(CudaBackendError):
    """The program stopped making progress; the message names the stuck threadblocks, `details` one per line,
    `status` is the (nblocks, STATUS_COLS) table the kernel would have written."""

    def __init__(self, message: str, details: tuple[str, ...] = (), status: np.ndarray | None = None) -> None:
        super().__init__(message)
        self.details = details
        self.status = status


_SEND, _RECV, _RCS, _RRS, _RRC, _RRCS, _CPY, _RE, _NOP = (
    STEP_CODES[t] for t in (StepType.SEND, StepType.RECV, StepType.RECV_COPY_SEND, StepType.RECV_REDUCE_SEND,
                            StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_COPY_SEND, StepType.COPY, StepType.REDUCE,
                            StepType.NOP))
_SENDS = frozenset(STEP_CODES[t] for t in SENDING_TYPES)
_RECVS = frozenset(STEP_CODES[t] for t in RECEIVING_TYPES)


def deadlock_message(flat: FlatProgram, status: np.ndarray, reason: str, limit: int = 8) -> str:
    """One line naming the stuck threadblocks from a (nblocks, STATUS_COLS) status table."""
    stuck = [b for b in range(flat.nblocks) if status[b, 0] == STATE_STUCK]
    waits = [flat.describe_wait(b, int(status[b, 1]), int(status[b, 2]), int(status[b, 3])) for b in stuck[:limit]]
    more = f"; and {len(stuck) - limit} more" if len(stuck) > limit else ""
    unfinished = sum(1 for b in range(flat.nblocks) if status[b, 0] != STATE_DONE)
    return (f"deadlock in {flat.name!r} ({reason}): {unfinished} of {flat.nblocks} threadblocks unfinished; stuck: "
            + "; ".join(waits) + more)


def _gather(arena: np.ndarray, base: int, stride: int, cnt: int, length: int) -> np.ndarray:
    index = base + np.arange(cnt, dtype=np.int64)[:, None] * stride + np.arange(length, dtype=np.int64)[None, :]
    return arena[index]


def _scatter(arena: np.ndarray, base: int, stride: int, values: np.ndarray) -> None:
    cnt, length = values.shape
    index = base + np.arange(cnt, dtype=np.int64)[:, None] * stride + np.arange(length, dtype=np.int64)[None, :]
    arena[index] = values


def emulate(flat: FlatProgram, data: np.ndarray, dtype: ElementType, op: str = "sum") -> np.ndarray:
    """Run the flat program on the data arena (modified in place); returns the final status table.

    Raises DeadlockError (naming the stuck blocks) when no block can move and work is left."""
    reduce = reducer(dtype, op)
    fifo = np.zeros(flat.fifo_elems, dtype=data.dtype)
    tail = np.zeros(flat.nconns, dtype=np.int64)  # messages written per connection
    head = np.zeros(flat.nconns, dtype=np.int64)  # messages consumed per connection
    progress = np.zeros(flat.nblocks, dtype=np.int64)
    status = np.zeros((flat.nblocks, STATUS_COLS), dtype=np.int64)
    tile = np.zeros(flat.nblocks, dtype=np.int64)
    step = np.zeros(flat.nblocks, dtype=np.int64)
    E, P = flat.chunk_elems, flat.piece_elems

    def blocked(b: int, t: int, st: np.ndarray) -> int:
        """The wait kind that stops block b now (0 when it can run its step), checked in the kernel's order."""
        dep = int(st[STEP_DEP_BLOCK])
        if dep >= 0 and progress[dep] < t * st[STEP_DEP_NSTEPS] + st[STEP_DEP_STEP] + 1:
            return WAIT_DEP
        code = int(st[STEP_TYPE])
        if code in _RECVS:
            rc = int(flat.blocks[b, BLOCK_RECV_CONN])
            if tail[rc] <= head[rc]:
                return WAIT_RECV
        if code in _SENDS:
            sc = int(flat.blocks[b, BLOCK_SEND_CONN])
            if tail[sc] - head[sc] >= flat.nslots:
                return WAIT_SEND
        return 0

    def run(b: int, t: int, st: np.ndarray) -> None:
        code, cnt = int(st[STEP_TYPE]), int(st[STEP_CNT])
        length, off = flat.tile_len(t), t * P
        if code == _NOP:
            return
        value: Any = None  # the values the step moves (every step type that writes or sends sets it first)
        if code in _RECVS:
            rc = int(flat.blocks[b, BLOCK_RECV_CONN])
            slot = int(flat.conns[rc, CONN_SLOT_BASE]) + int(head[rc] % flat.nslots) * flat.slot_elems
            value = _gather(fifo, slot, P, cnt, length)
            head[rc] += 1
        if code in (_RRS, _RRC, _RRCS):
            value = reduce(value, _gather(data, int(st[STEP_SRC]) + off, E, cnt, length))
        elif code in (_SEND, _CPY):
            value = _gather(data, int(st[STEP_SRC]) + off, E, cnt, length)
        elif code == _RE:
            value = reduce(_gather(data, int(st[STEP_DST]) + off, E, cnt, length),
                           _gather(data, int(st[STEP_SRC]) + off, E, cnt, length))
        if code in (_RECV, _RCS, _RRC, _RRCS, _CPY, _RE):
            _scatter(data, int(st[STEP_DST]) + off, E, value)
        if code in _SENDS:
            sc = int(flat.blocks[b, BLOCK_SEND_CONN])
            slot = int(flat.conns[sc, CONN_SLOT_BASE]) + int(tail[sc] % flat.nslots) * flat.slot_elems
            _scatter(fifo, slot, P, value)
            tail[sc] += 1

    live = [b for b in range(flat.nblocks) if flat.blocks[b, BLOCK_NSTEPS] > 0 and flat.ntiles > 0]
    for b in range(flat.nblocks):
        if b not in live:
            status[b, 0] = STATE_DONE
    while live:
        moved = False
        still = []
        for b in live:
            first, nsteps = int(flat.blocks[b, BLOCK_FIRST_STEP]), int(flat.blocks[b, BLOCK_NSTEPS])
            while True:
                t, s = int(tile[b]), int(step[b])
                st = flat.steps[first + s]
                kind = blocked(b, t, st)
                if kind:
                    status[b, 1:] = (t, s, kind)
                    break
                run(b, t, st)
                moved = True
                if st[STEP_PUBLISH]:
                    progress[b] = t * nsteps + s + 1
                if s + 1 < nsteps:
                    step[b] = s + 1
                elif t + 1 < flat.ntiles:
                    tile[b], step[b] = t + 1, 0
                else:
                    status[b, 0] = STATE_DONE
                    break
            if status[b, 0] != STATE_DONE:
                still.append(b)
        live = still
        if live and not moved:
            for b in live:
                status[b, 0] = STATE_STUCK
            lines = tuple(flat.describe_wait(b, *(int(v) for v in status[b, 1:])) for b in live)
            raise DeadlockError(deadlock_message(flat, status, "no threadblock can move"), lines, status)
    return status
