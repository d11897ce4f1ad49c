"""Flattening of the compiled IR into the integer arrays the CUDA interpreter kernel reads (pure numpy).

Memory model (every rank of the algorithm lives on one GPU):

* **Data arena.** One array of elements holds, rank after rank, the input, output and scratch buffers;
  each buffer is `chunks * chunk_elems` elements and starts on a 16-byte boundary. An inplace IR
  allocates only the larger of input and output and aliases the smaller into it as MSCCL/NCCL do:
  AllGather-like (output larger) input = output + rank * i_chunks chunks; ReduceScatter-like (input
  larger) output = input + rank * o_chunks chunks; equal sizes alias at offset 0.
* **Chunks and tiles.** A rank's input buffer of `nbytes` is split into `i_chunks` chunks of
  `chunk_elems` elements (every buffer uses the same chunk size). As in MSCCL's loop over `gridOffset`,
  the kernel runs the whole program once per *tile*: tile `t` covers elements
  `[t * piece_elems, t * piece_elems + len_t)` of every chunk, so the `nchunksperloop` chunks are
  processed piece by piece and pipelined through the FIFO slots.
* **Connections.** One FIFO per (sender, receiver, channel), numbered in sorted order. It has `nslots`
  slots of `slot_elems = max_cnt * piece_elems` elements; a message is one sending step of one tile and
  holds its `cnt` pieces at stride `piece_elems`. Counters: `tail` (messages written, by the sender) and
  `head` (messages consumed, by the receiver); a send waits for `tail - head < nslots`, a receive for
  `tail > head`.
* **Dependencies.** As in the CPU interpreter, a block publishes after each non-nop step marked
  `hasdep`: `progress = t * nsteps + s + 1` after step `s` of tile `t`; a step with `(depid, deps)`
  waits, within the same tile, for `progress[dep_block] >= t * nsteps[dep_block] + deps + 1` (that
  step or a later one has published).

The column layouts below are mirrored by `#define`s in interpreter.cu (a test checks they agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from collsynth.core.enums import StepType
from collsynth.core.steps import LOCAL_DST_TYPES, LOCAL_SRC_TYPES, LOCAL_TYPES, STEP_SEMANTICS
from collsynth.ir import (
    NOP,
    RECEIVING_TYPES,
    SENDING_TYPES,
    Algo,
)
from collsynth.runtime.layout import BufferLayout, ExecutionError
from collsynth.runtime.result import DEADLOCK, LEFTOVER, MESSAGE_SIZE


class CudaBackendError(ExecutionError):
    """The CUDA backend cannot run this IR or this request (the message says what to change)."""


class MessageMismatchError(CudaBackendError):
    """Sends and receives of a connection do not pair up (kind: the CPU interpreter's failure name)."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


class OutOfBoundsError(CudaBackendError):
    """A step names chunks outside its rank's buffers (the CPU interpreter calls this a layout failure)."""


class ResidencyError(CudaBackendError):
    """The IR has more threadblocks than the GPU can keep resident at once (cooperative launch)."""


# Step type codes (kernel `CS_*` constants), from the one step-semantics table.
STEP_CODES = MappingProxyType({step_type: sem.code for step_type, sem in STEP_SEMANTICS.items()})
STEP_NAMES = MappingProxyType({code: name for name, code in STEP_CODES.items()})

# Which local operands each step type touches: src (read) and dst (written).
_USES_SRC = LOCAL_SRC_TYPES
_USES_DST = LOCAL_DST_TYPES

# Column layout of the flattened tables (int64).
STEP_TYPE, STEP_CNT, STEP_SRC, STEP_DST, STEP_DEP_BLOCK, STEP_DEP_STEP, STEP_DEP_NSTEPS, STEP_PUBLISH = range(8)
STEP_COLS = 8
BLOCK_RANK, BLOCK_TB, BLOCK_FIRST_STEP, BLOCK_NSTEPS, BLOCK_SEND_CONN, BLOCK_RECV_CONN, BLOCK_CHAN = range(7)
BLOCK_COLS = 8
CONN_SENDER, CONN_RECEIVER, CONN_CHAN, CONN_SLOT_BASE, CONN_SEND_BLOCK, CONN_RECV_BLOCK = range(6)
CONN_COLS = 6

# Per-block status written by the kernel (and by the emulator): state, tile, step, wait kind.
STATUS_COLS = 4
STATE_RUNNING, STATE_DONE, STATE_STUCK = 0, 1, 2
WAIT_NONE, WAIT_DEP, WAIT_RECV, WAIT_SEND = 0, 1, 2, 3

BUFFER_IDS = MappingProxyType({"i": 0, "o": 1, "s": 2})
VECTOR_BYTES = 16
DEFAULT_NSLOTS = 8  # NCCL_STEPS: slots per connection
DEFAULT_SLOT_BYTES = 256 * 1024  # bytes one message (one step of one tile) may carry
DEFAULT_FIFO_LIMIT_BYTES = 1 << 30  # piece size shrinks so that all FIFOs together stay under this


@dataclass(frozen=True)
class FlatProgram:
    """An IR flattened for one (nbytes, dtype): what the kernel and the emulator execute."""

    name: str
    ngpus: int
    itemsize: int
    chunk_elems: int  # E: elements per chunk, the same for every buffer
    piece_elems: int  # P: elements of each chunk processed per tile
    ntiles: int
    nslots: int
    slot_elems: int  # max_cnt * P
    vectorize: bool  # every chunk piece and slot starts 16-byte aligned: the kernel may use 16-byte accesses
    data_elems: int  # size of the data arena
    fifo_elems: int  # size of the FIFO arena
    buffer_base: np.ndarray  # (ngpus, 3) element offset of buffers i, o, s in the data arena
    buffer_chunks: np.ndarray  # (ngpus, 3) chunks per buffer
    blocks: np.ndarray  # (nblocks, BLOCK_COLS)
    steps: np.ndarray  # (nsteps, STEP_COLS)
    conns: np.ndarray  # (nconns, CONN_COLS)

    @property
    def nblocks(self) -> int:
        return int(self.blocks.shape[0])

    @property
    def nconns(self) -> int:
        return int(self.conns.shape[0])

    def tile_len(self, tile: int) -> int:
        """Elements of each chunk that tile `tile` covers (the last tile may be short)."""
        return min(self.piece_elems, self.chunk_elems - tile * self.piece_elems)

    def block_name(self, block: int) -> str:
        return f"rank {int(self.blocks[block, BLOCK_RANK])} tb {int(self.blocks[block, BLOCK_TB])}"

    def buffer_view(self, data: np.ndarray, rank: int, buffer: str) -> np.ndarray:
        """The (chunks, chunk_elems) view of one rank's buffer inside a data arena."""
        b = BUFFER_IDS[buffer]
        base, chunks = int(self.buffer_base[rank, b]), int(self.buffer_chunks[rank, b])
        return data[base:base + chunks * self.chunk_elems].reshape(chunks, self.chunk_elems)

    def describe_wait(self, block: int, tile: int, step: int, kind: int) -> str:
        """`rank 0 tb 1 step 3 (tile 0): waiting to receive from rank 7 on channel 0`."""
        where = f"{self.block_name(block)} step {step} (tile {tile} of {self.ntiles})"
        row = self.blocks[block]
        if kind == WAIT_DEP:
            flat = self.steps[int(row[BLOCK_FIRST_STEP]) + step]
            dep = int(flat[STEP_DEP_BLOCK])
            return f"{where}: waiting for {self.block_name(dep)} step {int(flat[STEP_DEP_STEP])}"
        if kind == WAIT_RECV:
            conn = self.conns[int(row[BLOCK_RECV_CONN])]
            return f"{where}: waiting to receive from rank {int(conn[CONN_SENDER])} on channel {int(conn[CONN_CHAN])}"
        if kind == WAIT_SEND:
            conn = self.conns[int(row[BLOCK_SEND_CONN])]
            return (f"{where}: waiting for a free slot to send to rank {int(conn[CONN_RECEIVER])} "
                    f"on channel {int(conn[CONN_CHAN])}")
        return where

    def __str__(self) -> str:
        lines = [f"flat {self.name!r}: {self.ngpus} ranks, {self.nblocks} blocks, {self.nconns} connections, "
                 f"chunk={self.chunk_elems} elems, piece={self.piece_elems}, tiles={self.ntiles}, "
                 f"slots={self.nslots}x{self.slot_elems}, vectorize={self.vectorize}"]
        for b, row in enumerate(self.blocks):
            lines.append(f"  block {b} = {self.block_name(b)}: send conn {int(row[BLOCK_SEND_CONN])}, "
                         f"recv conn {int(row[BLOCK_RECV_CONN])}")
            first = int(row[BLOCK_FIRST_STEP])
            for s in range(int(row[BLOCK_NSTEPS])):
                st = self.steps[first + s]
                dep = (f" after block {int(st[STEP_DEP_BLOCK])}.s{int(st[STEP_DEP_STEP])}"
                       if st[STEP_DEP_BLOCK] >= 0 else "")
                pub = " publish" if st[STEP_PUBLISH] else ""
                lines.append(f"    s{s}: {STEP_NAMES[int(st[STEP_TYPE])]} x{int(st[STEP_CNT])} "
                             f"src@{int(st[STEP_SRC])} dst@{int(st[STEP_DST])}{dep}{pub}")
        return "\n".join(lines)


def _align_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def buffer_layout(layout: BufferLayout, itemsize: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Element offsets (ngpus, 3) of buffers i/o/s in the data arena, their chunk counts, and the arena size.

    Sizes and in-place aliasing come from the shared BufferLayout (collsynth.runtime.layout), so both
    backends address the same data."""
    align = max(1, VECTOR_BYTES // itemsize)
    E = layout.chunk_elems
    base = np.zeros((layout.ngpus, 3), dtype=np.int64)
    chunks = np.zeros((layout.ngpus, 3), dtype=np.int64)
    cursor = 0
    for rank in range(layout.ngpus):
        chunks[rank] = (layout.input_chunks, layout.output_chunks, layout.scratch_chunks[rank])
        if layout.inplace:
            storage = cursor
            cursor = _align_up(cursor + layout.storage_chunks * E, align)
            base[rank, 0] = storage + layout.input_offset(rank) * E
            base[rank, 1] = storage + layout.output_offset(rank) * E
            for b, name in ((0, "input"), (1, "output")):
                if base[rank, b] + chunks[rank, b] * E > storage + layout.storage_chunks * E:
                    raise CudaBackendError(f"in-place rank {rank}: its {name} slice does not fit the aliased buffer "
                                           f"of {layout.storage_chunks} chunks")
        else:
            base[rank, 0] = cursor
            cursor = _align_up(cursor + layout.input_chunks * E, align)
            base[rank, 1] = cursor
            cursor = _align_up(cursor + layout.output_chunks * E, align)
        base[rank, 2] = cursor
        cursor = _align_up(cursor + layout.scratch_chunks[rank] * E, align)
    return base, chunks, max(cursor, align)


def _check_operand(ir: Algo, rank: int, tb: int, step, buffer: str, offset: int, chunks: np.ndarray) -> None:
    if buffer not in BUFFER_IDS:
        raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb} step {step.s}: unknown buffer {buffer!r}; "
                               "use 'i', 'o' or 's'")
    have = int(chunks[rank, BUFFER_IDS[buffer]])
    if offset < 0 or offset + step.cnt > have:
        raise OutOfBoundsError(f"{ir.name}: gpu {rank} tb {tb} step {step.s} ({step.type}) reads/writes chunks "
                               f"{offset}..{offset + step.cnt - 1} of buffer {buffer!r}, which has {have} chunks")


def _check_no_partial_overlap(ir: Algo, rank: int, tb: int, step, src: int, dst: int, chunk_elems: int) -> None:
    # cpy/re are elementwise: identical ranges are fine, partly overlapping ones would race between threads.
    span = step.cnt * chunk_elems
    if src != dst and src < dst + span and dst < src + span:
        raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb} step {step.s} ({step.type}): source and destination "
                               "ranges overlap partially; split the step so each chunk maps to a disjoint chunk")


def _connections(ir: Algo, block_index: dict[tuple[int, int], int]) -> tuple[list[tuple[int, int, int]], dict]:
    """Sorted connection keys (sender, receiver, chan) and, per key, its (sending block, receiving block)."""
    ends: dict[tuple[int, int, int], list[int]] = {}
    for gpu, tb in ir.threadblocks():
        for peer, role, key in ((tb.send, 0, (gpu.id, tb.send, tb.chan)), (tb.recv, 1, (tb.recv, gpu.id, tb.chan))):
            if peer < 0:
                continue
            if not 0 <= peer < ir.ngpus:
                raise CudaBackendError(f"{ir.name}: gpu {gpu.id} tb {tb.id} names peer rank {peer}, outside "
                                       f"0..{ir.ngpus - 1}")
            pair = ends.setdefault(key, [-1, -1])
            if pair[role] >= 0:
                other = pair[role]
                verb = "send to" if role == 0 else "receive from"
                raise CudaBackendError(f"{ir.name}: gpu {gpu.id} tbs {other - block_index[(gpu.id, 0)]} and {tb.id} "
                                       f"both {verb} rank {peer} on channel {tb.chan}; one FIFO per (sender, "
                                       "receiver, channel) has one threadblock at each end: use another channel")
            pair[role] = block_index[(gpu.id, tb.id)]
    keys = sorted(ends)
    return keys, {k: tuple(ends[k]) for k in keys}


def _check_messages(ir: Algo, keys, ends, tbs_by_block) -> int:
    """Every message sent on a connection is received, in order, with the same count; returns max cnt."""
    max_cnt = 1
    for key in keys:
        send_block, recv_block = ends[key]
        sends = [st for st in tbs_by_block[send_block][1].steps if st.type in SENDING_TYPES] if send_block >= 0 else []
        recvs = ([st for st in tbs_by_block[recv_block][1].steps if st.type in RECEIVING_TYPES]
                 if recv_block >= 0 else [])
        sender, receiver, chan = key
        where = f"connection rank {sender} -> rank {receiver} channel {chan}"
        for k, (snd, rcv) in enumerate(zip(sends, recvs, strict=False)):
            if snd.cnt != rcv.cnt:
                raise MessageMismatchError(f"{ir.name}: {where} message {k}: sender step {snd.s} has cnt {snd.cnt} "
                                           f"but receiver step {rcv.s} has cnt {rcv.cnt}", MESSAGE_SIZE)
            max_cnt = max(max_cnt, snd.cnt)
        if len(sends) > len(recvs):
            raise MessageMismatchError(f"{ir.name}: {where} carries {len(sends)} sends but {len(recvs)} receives; "
                                       "every send needs a matching receive on the peer's threadblock", LEFTOVER)
        if len(recvs) > len(sends):
            raise MessageMismatchError(f"{ir.name}: {where} carries {len(recvs)} receives but only {len(sends)} "
                                       "sends: the receiver would wait forever", DEADLOCK)
    return max_cnt


def choose_piece(chunk_elems: int, tile_elems: int, itemsize: int, max_cnt: int, nconns: int, nslots: int,
                 slot_bytes: int, fifo_limit_bytes: int) -> int:
    """Elements of each chunk per tile: at most the layout's tile, a message of `max_cnt` pieces fits `slot_bytes`,
    all FIFOs together fit `fifo_limit_bytes`, and (when there is more than one tile) a multiple of 16 bytes."""
    align = max(1, VECTOR_BYTES // itemsize)
    budget = slot_bytes
    if nconns:
        budget = min(budget, fifo_limit_bytes // (nconns * nslots))
    piece = min(budget // (max_cnt * itemsize), tile_elems) // align * align
    piece = max(piece, align)
    return chunk_elems if chunk_elems <= piece else piece


def flatten(ir: Algo, layout: BufferLayout, itemsize: int, *, nslots: int = DEFAULT_NSLOTS,
            slot_bytes: int = DEFAULT_SLOT_BYTES, fifo_limit_bytes: int = DEFAULT_FIFO_LIMIT_BYTES) -> FlatProgram:
    """Flatten `ir` for the buffers of `layout` (see plan_layout) with `itemsize`-byte elements."""
    if nslots < 1:
        raise CudaBackendError(f"nslots must be >= 1, got {nslots}")
    if [g.id for g in ir.gpus] != list(range(ir.ngpus)) or layout.ngpus != ir.ngpus:
        raise CudaBackendError(f"{ir.name}: gpu ids must be 0..{ir.ngpus - 1} in order, one per rank of the layout")
    chunk_elems = layout.chunk_elems
    buffer_base, buffer_chunks, data_elems = buffer_layout(layout, itemsize)

    tbs_by_block = list(ir.threadblocks())
    block_index = {(gpu.id, tb.id): b for b, (gpu, tb) in enumerate(tbs_by_block)}
    for gpu in ir.gpus:
        if [tb.id for tb in gpu.tbs] != list(range(len(gpu.tbs))):
            raise CudaBackendError(f"{ir.name}: gpu {gpu.id} threadblock ids must be 0..{len(gpu.tbs) - 1} in order")
    keys, ends = _connections(ir, block_index)
    conn_id = {key: c for c, key in enumerate(keys)}
    max_cnt = _check_messages(ir, keys, ends, tbs_by_block)
    piece_elems = choose_piece(chunk_elems, layout.tile_elems, itemsize, max_cnt, len(keys), nslots, slot_bytes,
                               fifo_limit_bytes)
    ntiles = -(-chunk_elems // piece_elems)
    slot_elems = max_cnt * piece_elems
    vec_elems = max(1, VECTOR_BYTES // itemsize)
    vectorize = chunk_elems % vec_elems == 0 and piece_elems % vec_elems == 0

    conns = np.full((len(keys), CONN_COLS), -1, dtype=np.int64)
    for c, key in enumerate(keys):
        conns[c, CONN_SENDER:CONN_CHAN + 1] = key
        conns[c, CONN_SLOT_BASE] = c * nslots * slot_elems
        conns[c, CONN_SEND_BLOCK], conns[c, CONN_RECV_BLOCK] = ends[key]

    blocks = np.full((len(tbs_by_block), BLOCK_COLS), -1, dtype=np.int64)
    rows: list[list[int]] = []
    for b, (gpu, tb) in enumerate(tbs_by_block):
        rank = gpu.id
        if [st.s for st in tb.steps] != list(range(len(tb.steps))):
            raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb.id} step numbers must be 0..{len(tb.steps) - 1}")
        blocks[b, :BLOCK_CHAN + 1] = (rank, tb.id, len(rows), len(tb.steps),
                                      conn_id.get((rank, tb.send, tb.chan), -1) if tb.send >= 0 else -1,
                                      conn_id.get((tb.recv, rank, tb.chan), -1) if tb.recv >= 0 else -1, tb.chan)
        for st in tb.steps:
            if st.type not in STEP_CODES:
                raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb.id} step {st.s}: unknown step type "
                                       f"{st.type!r}; known: {', '.join(STEP_CODES)}")
            if st.type != NOP and st.cnt < 1:
                raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb.id} step {st.s}: cnt must be >= 1, got {st.cnt}")
            if st.type in SENDING_TYPES and tb.send < 0:
                raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb.id} step {st.s} ({st.type}) sends but the "
                                       "threadblock has send=-1")
            if st.type in RECEIVING_TYPES and tb.recv < 0:
                raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb.id} step {st.s} ({st.type}) receives but the "
                                       "threadblock has recv=-1")
            src = dst = -1
            if st.type in _USES_SRC:
                _check_operand(ir, rank, tb.id, st, st.srcbuf, st.srcoff, buffer_chunks)
                src = int(buffer_base[rank, BUFFER_IDS[st.srcbuf]]) + st.srcoff * chunk_elems
            if st.type in _USES_DST:
                _check_operand(ir, rank, tb.id, st, st.dstbuf, st.dstoff, buffer_chunks)
                dst = int(buffer_base[rank, BUFFER_IDS[st.dstbuf]]) + st.dstoff * chunk_elems
            if st.type in LOCAL_TYPES:
                _check_no_partial_overlap(ir, rank, tb.id, st, src, dst, chunk_elems)
            dep_block = dep_step = dep_nsteps = -1
            if st.depid >= 0 and st.depid != tb.id:
                if (rank, st.depid) not in block_index or not 0 <= st.deps < len(gpu.tbs[st.depid].steps):
                    raise CudaBackendError(f"{ir.name}: gpu {rank} tb {tb.id} step {st.s} waits for tb {st.depid} "
                                           f"step {st.deps}, which does not exist")
                dep_block, dep_step = block_index[(rank, st.depid)], st.deps
                dep_nsteps = len(gpu.tbs[st.depid].steps)
            publish = int(st.hasdep and st.type != NOP)  # the CPU interpreter's rule: a nop only waits
            code = STEP_CODES[StepType(st.type)]
            rows.append([code, max(st.cnt, 0), src, dst, dep_block, dep_step, dep_nsteps, publish])
    steps = np.array(rows, dtype=np.int64).reshape(len(rows), STEP_COLS)
    return FlatProgram(
        name=ir.name, ngpus=ir.ngpus, itemsize=itemsize, chunk_elems=chunk_elems, piece_elems=piece_elems,
        ntiles=ntiles, nslots=nslots, slot_elems=slot_elems, vectorize=vectorize, data_elems=data_elems,
        fifo_elems=max(len(keys) * nslots * slot_elems, 1), buffer_base=buffer_base, buffer_chunks=buffer_chunks,
        blocks=blocks, steps=steps, conns=conns)


def check_residency(nblocks: int, sm_count: int, blocks_per_sm: int, *, name: str = "IR") -> None:
    """Refuse a cooperative launch whose blocks cannot all be resident (they spin-wait on each other)."""
    capacity = sm_count * blocks_per_sm
    if nblocks > capacity:
        raise ResidencyError(f"{name}: needs {nblocks} resident threadblocks but this GPU holds at most {capacity} "
                             f"({sm_count} SMs x {blocks_per_sm} blocks/SM); use fewer instances/channels or ranks")




def traffic_bytes(flat: FlatProgram) -> tuple[int, int]:
    """(bytes sent between ranks, bytes of device memory read + written) for one run of the program."""
    codes = flat.steps[:, STEP_TYPE]
    factor = np.array([STEP_SEMANTICS[STEP_NAMES[c]].traffic for c in range(len(STEP_CODES))], dtype=np.int64)
    step_bytes = flat.steps[:, STEP_CNT] * flat.chunk_elems * flat.itemsize
    sending = np.isin(codes, [STEP_CODES[t] for t in SENDING_TYPES])
    return int(step_bytes[sending].sum()), int((step_bytes * factor[codes]).sum())


def output_written_mask(flat: FlatProgram) -> list[np.ndarray]:
    """Per rank, which output chunks some step writes (through any alias of the output buffer)."""
    masks = [np.zeros(int(flat.buffer_chunks[r, 1]), dtype=bool) for r in range(flat.ngpus)]
    writes = np.isin(flat.steps[:, STEP_TYPE], [STEP_CODES[t] for t in _USES_DST])
    E = flat.chunk_elems
    for b in range(flat.nblocks):
        rank = int(flat.blocks[b, BLOCK_RANK])
        first, count = int(flat.blocks[b, BLOCK_FIRST_STEP]), int(flat.blocks[b, BLOCK_NSTEPS])
        out_base, out_chunks = int(flat.buffer_base[rank, 1]), int(flat.buffer_chunks[rank, 1])
        for row in flat.steps[first:first + count][writes[first:first + count]]:
            start = (int(row[STEP_DST]) - out_base) // E
            lo, hi = max(start, 0), min(start + int(row[STEP_CNT]), out_chunks)
            if lo < hi:
                masks[rank][lo:hi] = True
    return masks
