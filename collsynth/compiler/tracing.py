"""trace_to_dag's common case by arrays: a program whose ops all copy one chunk (a lowered schedule: every
AllGather or relay step), out of place. Each op reads one slot and writes one other slot, so the dependencies
of the whole program come from one sort of those reads and writes by (slot, op): a read waits for the slot's
last write before it; a write waits for the reads since that write, or for that write if nobody read it (the
rules of compiler/dag.py `trace_to_dag`, which handles every other program, and words every error)."""

from __future__ import annotations

from itertools import islice
from operator import attrgetter
from typing import Any

import numpy as np

from collsynth.compiler.dag import Instr, instr_of_fields
from collsynth.ir import COPY, RECV, SEND
from collsynth.language.program import COPY as OP_COPY
from collsynth.language.program import Program


def trace_unit_copies(program: Program, base: dict[tuple[int, str], int], initial: np.ndarray,
                      manual: bool) -> tuple[list[Instr], dict[str, list[Any]]] | None:
    """The instrs trace_to_dag makes for `program`, or None when it is not a program of one-chunk copies out of
    place, or reads a slot nobody wrote (the loop then raises). `base`: the first slot id of every (rank,
    buffer); `initial`: per slot id, whether it holds data at the start."""
    ops = program.ops
    m = len(ops)
    if not m or program.collective.inplace or any(op != OP_COPY for op in map(attrgetter("op"), ops)):
        return None
    srcs, dsts = list(map(attrgetter("src"), ops)), list(map(attrgetter("dst"), ops))
    if any(c != 1 for c in map(attrgetter("count"), srcs)):
        return None
    srank_l, drank_l = list(map(attrgetter("rank"), srcs)), list(map(attrgetter("rank"), dsts))
    sbuf_l, dbuf_l = list(map(attrgetter("buffer"), srcs)), list(map(attrgetter("buffer"), dsts))
    soff_l, doff_l = list(map(attrgetter("index"), srcs)), list(map(attrgetter("index"), dsts))
    srank, drank = np.array(srank_l, dtype=np.int64), np.array(drank_l, dtype=np.int64)
    names = {name: k for k, name in enumerate(sorted({name for _, name in base}))}
    first = np.full((program.num_ranks, len(names)), -1, dtype=np.int64)
    for (rank, name), slot in base.items():
        first[rank, names[name]] = slot
    sslot = first[srank, np.fromiter(map(names.__getitem__, sbuf_l), dtype=np.int64, count=m)]
    dslot = first[drank, np.fromiter(map(names.__getitem__, dbuf_l), dtype=np.int64, count=m)]
    if min(int(sslot.min()), int(dslot.min())) < 0:
        return None
    sslot += np.array(soff_l, dtype=np.int64)
    dslot += np.array(doff_l, dtype=np.int64)
    remote = srank != drank
    made = np.where(remote, 2, np.where(sslot == dslot, 0, 1))  # instrs per op (a copy onto itself: none)
    idx = np.cumsum(made) - made  # the op's first instr
    deps = _slot_dependencies(sslot, dslot, idx, idx + remote, made > 0, initial)
    if deps is None:
        return None
    previous = _previous_message(srank * program.num_ranks + drank, remote, idx)
    # the instrs as columns: instr k belongs to op `op[k]`, as its send (role 0), receive (1) or copy (2)
    op = np.repeat(np.arange(m), made)
    role = np.where(remote[op], np.arange(op.size) - idx[op], 2)
    sending, receiving = role == 0, role == 1
    bufs = np.array(sorted(names, key=names.__getitem__), dtype=object)
    sbuf = np.fromiter(map(names.__getitem__, sbuf_l), dtype=np.int64, count=m)[op]
    dbuf = np.fromiter(map(names.__getitem__, dbuf_l), dtype=np.int64, count=m)[op]
    soff, doff = np.array(soff_l, dtype=np.int64)[op], np.array(doff_l, dtype=np.int64)[op]
    # a send names its slot on both sides, a receive the receiver's slot, a copy its source and its destination
    src_buf, src_off = np.where(receiving, dbuf, sbuf), np.where(receiving, doff, soff)
    dst_buf, dst_off = np.where(sending, sbuf, dbuf), np.where(sending, soff, doff)
    hints = [-1] * m
    send_hint = np.array(list(map(_hint, map(attrgetter("sendtb"), ops))) if manual else hints, dtype=np.int64)
    recv_hint = np.array(list(map(_hint, map(attrgetter("recvtb"), ops))) if manual else hints, dtype=np.int64)
    channel = np.array([-1 if c is None else c for c in map(attrgetter("channel"), ops)], dtype=np.int64)
    lines = np.array(list(map(attrgetter("line"), ops)), dtype=np.int64)
    k = np.arange(op.size)
    with_preds = _preds(k, op, role, deps)
    queued = np.flatnonzero((role != 2) & (previous[op] >= 0))
    with_after = _tuples(op.size, queued, previous[op[queued]] + role[queued])
    columns = (np.array([SEND, RECV, COPY], dtype=object)[role].tolist(), np.where(receiving, drank[op], srank[op]),
               bufs[src_buf].tolist(), src_off, bufs[dst_buf].tolist(), dst_off, [1] * op.size,
               np.where(sending, drank[op], -1), np.where(receiving, srank[op], -1),
               np.where(receiving, recv_hint[op], send_hint[op]), channel[op], lines[op], with_preds, with_after,
               np.where(sending, k + 1, -1))
    lists = [c.tolist() if isinstance(c, np.ndarray) else c for c in columns]
    kept = {name: lists[f] for f, name in enumerate(Instr._fields) if name in _KEPT}  # for InstrDAG.column
    return list(map(instr_of_fields, zip(*lists, strict=True))), kept


# the columns the later passes read (InstrDAG.column), kept from the tracing
_KEPT = frozenset({"kind", "rank", "send_peer", "recv_peer", "tb_hint", "ch_hint", "cnt", "src_off", "dst_off",
                   "preds", "after", "send_to"})


def _hint(tb: int | None) -> int:
    return -1 if tb is None else tb


def _preds(k: np.ndarray, op: np.ndarray, role: np.ndarray,
           deps: tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> list[tuple[int, ...]]:
    """Every instr's dependencies: a send (role 0) waits for its slot's last write; a receive (1) for the reads of
    its slot since the last write, else for that write; a copy (2) for both."""
    read_dep, (event_instr, low, high, last) = deps
    reading = role != 1
    heads = [k[reading], k[role != 0]]
    tails = [read_dep[op[reading]]]
    writing = k[role != 0]
    wop = op[writing]
    many = high[wop] > low[wop]
    tails.append(np.where(many, -1, last[wop]))
    counts = (high - low)[wop[many]]
    starts = low[wop[many]]
    heads.append(np.repeat(writing[many], counts))
    tails.append(event_instr[np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()))])
    head, tail = np.concatenate(heads), np.concatenate(tails)
    keep = tail >= 0
    n = k.size
    key = np.unique(head[keep] * n + tail[keep])  # sorted by instr, then dependency, without repeats
    return _tuples(n, key // n, key % n)


def _tuples(n: int, heads: np.ndarray, tails: np.ndarray) -> list[tuple[int, ...]]:
    """Per node 0..n-1, the tails of its edges as a tuple (`heads` sorted)."""
    following = iter(tails.tolist())
    return [() if c == 0 else (next(following),) if c == 1 else tuple(islice(following, c))
            for c in np.bincount(heads, minlength=n).tolist()]


def _slot_dependencies(sslot: np.ndarray, dslot: np.ndarray, reader: np.ndarray, writer: np.ndarray,
                       live: np.ndarray, initial: np.ndarray
                       ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] | None:
    """Per op: the instr its read waits for (-1: none), and what its write waits for: the readers
    `readers[low:high]` (instrs) where high > low, else the instr `last` (-1: none). None when an op reads a slot
    that holds no data yet. Ops not `live` (a copy onto itself) read and write nothing."""
    m = sslot.size
    ops = np.flatnonzero(live)
    slot = np.concatenate([sslot[ops], dslot[ops]])
    instr = np.concatenate([reader[ops], writer[ops]])
    is_write = np.concatenate([np.zeros(ops.size, dtype=bool), np.ones(ops.size, dtype=bool)])
    # every slot's reads and writes in op order (an op reads one slot and writes another)
    by_slot = np.lexsort((np.concatenate([ops, ops]), slot))
    slot, instr, is_write = slot[by_slot], instr[by_slot], is_write[by_slot]
    pos = np.arange(slot.size)
    starts = np.maximum.accumulate(np.where(np.diff(slot, prepend=-1) != 0, pos, 0))  # its slot's first event
    last_write = np.maximum.accumulate(np.where(is_write, pos, -1))
    before = np.concatenate([[-1], last_write[:-1]])
    before = np.where(before >= starts, before, -1)  # the slot's last write before each event
    reads = ~is_write
    if not initial[slot[reads & (before < 0)]].all():
        return None
    read_dep = np.where(before >= 0, instr[np.maximum(before, 0)], -1)
    low = np.where(before >= 0, before + 1, starts)  # the reads since the last write: events low..pos-1
    at = np.empty(slot.size, dtype=np.int64)
    at[by_slot] = pos  # event -> its position in the slot order
    read_at, write_at = at[:ops.size], at[ops.size:]
    per_op = np.full(m, -1, dtype=np.int64)
    per_op[ops] = read_dep[read_at]
    low_op, high_op, last_op = np.zeros(m, dtype=np.int64), np.zeros(m, dtype=np.int64), np.full(m, -1, np.int64)
    low_op[ops], high_op[ops], last_op[ops] = low[write_at], write_at, read_dep[write_at]
    return per_op, (instr, low_op, high_op, last_op)


def _previous_message(connection: np.ndarray, remote: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Per op, the send of the previous message on its connection (-1: none, or a local op)."""
    messages = np.flatnonzero(remote)
    by_connection = messages[np.argsort(connection[messages], kind="stable")]
    same = np.concatenate([[False], connection[by_connection[1:]] == connection[by_connection[:-1]]])
    previous = np.full(idx.size, -1, dtype=np.int64)
    previous[by_connection[1:][same[1:]]] = idx[by_connection[:-1][same[1:]]]
    return previous
