"""trace_to_dag's work by arrays, for the programs it fits (see compiler/dag.py for the DAG it describes): every op
a copy of one chunk, out of place. A lowered cluster algorithm is such a program of a million ops, where the
trace one op at a time (compiler/dag.py) costs seconds; here each slot's reads and writes are sorted by slot once
and every dependency found by numpy. The instrs, numbered as the loop numbers them, come back as columns (one list
per Instr field, and int arrays that the later passes read), with the same fields and edges as the loop's
records. The ops' ranks, indices, hints and lines are ints (as Slot and ChunkOp declare them), so the int columns
made by arrays hold the values the loop would copy."""

from __future__ import annotations

from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from collsynth.ir import COPY, RECV, SEND
from collsynth.language.program import COPY as OP_COPY
from collsynth.language.program import Program

_OP_FIELDS = ("op", "src", "dst", "sendtb", "recvtb", "channel", "line")
_SLOT_FIELDS = ("rank", "buffer", "index", "count")


class TracedColumns(NamedTuple):
    """Every instr's fields: `fields` holds the 12 step fields of Instr, one list each, then preds, after (lists
    of tuples) and send_to (a list); `arrays` holds the int fields as arrays (by Instr field name), the kinds as
    numbers (`kind codes`: codes and the number of each kind, numbered in sorted order) and the edges in CSR form
    (`preds csr`, `after csr`: the count per instr and all of them one after another)."""

    fields: tuple[list[Any], ...]
    arrays: dict[str, Any]


def trace_columns(program: Program, base: dict[tuple[int, str], int], written: np.ndarray,
                  manual: bool) -> TracedColumns | None:
    """The traced instrs of `program` as columns, or None where the program does not fit (an op that reduces or
    moves several chunks, an inplace collective) or reads a slot nobody wrote (the loop words that error).
    `base`: the first slot id of each (rank, buffer); `written`: per slot id, whether it holds data at the start;
    `manual`: whether the ops' threadblock hints count."""
    ops = program.ops
    if not ops or program.collective.inplace:
        return None
    kinds, srcs, dsts, sendtbs, recvtbs, channels, lines = (list(map(attrgetter(name), ops)) for name in _OP_FIELDS)
    if kinds.count(OP_COPY) != len(kinds):
        return None
    src_rank, src_buf, src_off, src_cnt = (list(map(attrgetter(name), srcs)) for name in _SLOT_FIELDS)
    if src_cnt.count(1) != len(src_cnt):  # (validate_program checked that both slots have the same count)
        return None
    dst_rank, dst_buf, dst_off = (list(map(attrgetter(name), dsts)) for name in _SLOT_FIELDS[:3])
    srank, drank, soff, doff = map(_ints, (src_rank, dst_rank, src_off, dst_off))
    sfirst = _first_slots(base, program.num_ranks, srank, src_buf, soff)
    dfirst = _first_slots(base, program.num_ranks, drank, dst_buf, doff)
    local = srank == drank
    kept = np.flatnonzero(~(local & (sfirst == dfirst)))  # a copy of a slot onto itself makes no instr
    local = local[kept]
    size = np.where(local, 1, 2)  # a local copy is one instr, a message a send and a receive
    first = np.cumsum(size) - size  # each kept op's first instr
    n = int(size.sum())
    writer = first + (~local)  # the instr that writes the op's destination: the copy or the receive
    preds = _dependencies(n, sfirst[kept], dfirst[kept], first, writer, written)
    if preds is None:
        return None
    message = kept[~local]
    sends = first[~local]
    after = _queues(n, sends, srank[message] * program.num_ranks + drank[message])
    return _columns(n, kept, local, first, sends, preds, after,
                    (srank, drank, src_buf, dst_buf, soff, doff, sendtbs, recvtbs, channels, lines), manual)


def _ints(values: list[Any]) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=len(values))


def _first_slots(base: dict[tuple[int, str], int], ranks: int, rank: np.ndarray, buffer: list[str],
                 index: np.ndarray) -> np.ndarray:
    """The slot id of each (rank, buffer, index): `base` holds each buffer's first."""
    names = {name: k for k, name in enumerate(sorted({name for _, name in base}))}
    first = np.zeros((ranks, len(names)), dtype=np.int64)
    for (r, name), at in base.items():
        first[r, names[name]] = at
    code = np.fromiter(map(names.__getitem__, buffer), dtype=np.int64, count=len(buffer))
    return first[rank, code] + index


def _dependencies(n: int, reads: np.ndarray, writes: np.ndarray, reader: np.ndarray, writer: np.ndarray,
                  written: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The same-rank dependencies of every instr in CSR form (count per instr, then all in instr order, each
    instr's sorted): op k reads slot reads[k] as instr reader[k], then writes slot writes[k] as instr writer[k].
    A read waits for the slot's last write; a write for the reads since the last write, or else for that write.
    None when a read finds a slot nobody wrote."""
    slot = np.stack([reads, writes], axis=1).ravel()  # the events in program order: op k's read, then its write
    instr = np.stack([reader, writer], axis=1).ravel()
    by_slot = np.argsort(slot, kind="stable")  # each slot's events, in program order
    slot, instr = slot[by_slot], instr[by_slot]
    is_write = (by_slot & 1).astype(bool)
    at = np.arange(slot.size)
    start = np.maximum.accumulate(np.where(np.diff(slot, prepend=-1) != 0, at, 0))  # each event's slot's first
    last = np.maximum.accumulate(np.where(is_write, at, -1))  # the last write at or before each event (any slot)
    previous = np.empty_like(last)  # the last write of the event's slot before it, else -1
    previous[0] = -1
    previous[1:] = last[:-1]
    previous[previous < start] = -1
    read_at = np.flatnonzero(~is_write)
    never = previous[read_at] < 0
    if not written[slot[read_at[never]]].all():
        return None
    heads, tails = [], []
    found = read_at[~never]  # a read after a write in the program
    heads.append(instr[found])
    tails.append(instr[previous[found]])
    write_at = np.flatnonzero(is_write)
    since = np.where(previous[write_at] >= 0, previous[write_at] + 1, start[write_at])
    gap = write_at - since  # the reads since the last write (or since the start)
    plain = write_at[(gap == 0) & (previous[write_at] >= 0)]  # no reader: the last write
    heads.append(instr[plain])
    tails.append(instr[previous[plain]])
    read_by = gap > 0
    counts = gap[read_by]
    total = int(counts.sum())
    offsets = np.cumsum(counts) - counts
    heads.append(np.repeat(instr[write_at[read_by]], counts))
    tails.append(instr[np.repeat(since[read_by] - offsets, counts) + np.arange(total)])
    head, tail = np.concatenate(heads), np.concatenate(tails)
    keep = head != tail
    pair = np.sort(head[keep] * n + tail[keep])
    pair = pair[np.diff(pair, prepend=-1) != 0]  # sorted by instr, then dependency; each once
    return np.bincount(pair // n, minlength=n), pair % n


def _queues(n: int, sends: np.ndarray, connection: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The queue edges in CSR form: each message's send and receive wait for the previous message of its
    connection (its send and its receive), given the sends in program order and their connections."""
    by_connection = np.argsort(connection, kind="stable")
    ordered = sends[by_connection]
    follows = np.flatnonzero(connection[by_connection][1:] == connection[by_connection][:-1]) + 1
    previous = np.full(n, -1, dtype=np.int64)
    previous[ordered[follows]] = ordered[follows - 1]
    previous[ordered[follows] + 1] = ordered[follows - 1] + 1
    counts = (previous >= 0).astype(np.int64)
    return counts, previous[previous >= 0]


def _tuples(n: int, csr: tuple[np.ndarray, np.ndarray]) -> list[tuple[int, ...]]:
    """The edges of every instr as a tuple each, from CSR form (placed by an object array: no Python step per
    instr)."""
    counts, flat = csr
    starts = np.cumsum(counts) - counts
    out = np.empty(n, dtype=object)
    out.fill(())
    ones = np.flatnonzero(counts == 1)
    out[ones] = np.fromiter(zip(flat[starts[ones]].tolist()), dtype=object, count=ones.size)  # 1-tuples
    values = flat.tolist()
    for i in np.flatnonzero(counts > 1).tolist():
        out[i] = tuple(values[starts[i]:starts[i] + counts[i]])
    return out.tolist()  # type: ignore[no-any-return]


def _columns(n: int, kept: np.ndarray, local: np.ndarray, first: np.ndarray, sends: np.ndarray,
             preds: tuple[np.ndarray, np.ndarray], after: tuple[np.ndarray, np.ndarray],
             op_fields: tuple[Any, ...], manual: bool) -> TracedColumns:
    """The instrs' columns from their ops' fields (per op: source and destination rank, buffer and index, the
    hints and the line): a local copy is its op's one instr, a message a send on the source rank and a
    receive on the destination rank."""
    srank, drank, src_buf, dst_buf, soff, doff, sendtbs, recvtbs, channels, lines = op_fields
    recvs = sends + 1
    copies = first[local]
    on_send, on_copy = kept[~local], kept[local]  # the op of each send (and its receive) and of each copy

    def per_instr(at_send: np.ndarray | int, at_recv: np.ndarray | int, at_copy: np.ndarray | int,
                  dtype: Any = np.int64) -> np.ndarray:
        column = np.empty(n, dtype=dtype)
        column[sends], column[recvs], column[copies] = at_send, at_recv, at_copy
        return column

    def hint(values: list[int | None]) -> np.ndarray:
        return _ints(values if not values.count(None) else [-1 if v is None else v for v in values])

    kind = per_instr(0, 1, 2)
    rank = per_instr(srank[on_send], drank[on_send], srank[on_copy])
    src = per_instr(soff[on_send], doff[on_send], soff[on_copy])
    dst = per_instr(soff[on_send], doff[on_send], doff[on_copy])
    sbuf, dbuf = np.asarray(src_buf, dtype=object), np.asarray(dst_buf, dtype=object)
    send_peer = per_instr(drank[on_send], -1, -1)
    recv_peer = per_instr(-1, srank[on_send], -1)
    stb, rtb = (hint(sendtbs), hint(recvtbs)) if manual else (np.full(len(kept), -1), np.full(len(kept), -1))
    ch, line = hint(channels), _ints(lines)
    send_to = per_instr(recvs, -1, -1)
    ints = {"rank": rank, "src_off": src, "dst_off": dst, "cnt": np.ones(n, dtype=np.int64),
            "send_peer": send_peer, "recv_peer": recv_peer, "tb_hint": per_instr(stb[on_send], rtb[on_send],
                                                                                   stb[on_copy]),
            "ch_hint": per_instr(ch[on_send], ch[on_send], ch[on_copy]),
            "line": per_instr(line[on_send], line[on_send], line[on_copy]), "send_to": send_to}
    names = [SEND, RECV, COPY]
    present = sorted(names[k] for k in np.flatnonzero(np.bincount(kind, minlength=3)).tolist())
    number = {name: k for k, name in enumerate(present)}
    codes = np.asarray([number.get(name, -1) for name in names], dtype=np.int64)[kind]
    pred_tuples, after_tuples = _tuples(n, preds), _tuples(n, after)
    fields = (np.asarray(names, dtype=object)[kind].tolist(), rank.tolist(),
              per_instr(sbuf[on_send], dbuf[on_send], sbuf[on_copy], object).tolist(), src.tolist(),
              per_instr(sbuf[on_send], dbuf[on_send], dbuf[on_copy], object).tolist(), dst.tolist(),
              [1] * n, send_peer.tolist(), recv_peer.tolist(), ints["tb_hint"].tolist(), ints["ch_hint"].tolist(),
              ints["line"].tolist(), pred_tuples, after_tuples, send_to.tolist())
    for array in (*ints.values(), codes, *preds, *after):
        array.flags.writeable = False
    arrays: dict[str, Any] = {f"array {name}": array for name, array in ints.items()}
    arrays.update({"kind codes": (codes, number), "preds csr": preds, "after csr": after,
                   "preds": pred_tuples, "after": after_tuples, "send_to": fields[-1]})
    return TracedColumns(fields, arrays)
