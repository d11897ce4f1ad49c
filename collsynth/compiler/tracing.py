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


def trace_columns(program: Program, base: dict[tuple[int, str], int], sizes: dict[tuple[int, str], int],
                  written: np.ndarray, manual: bool) -> TracedColumns | None:
    """The traced instrs of `program` as columns, or None where the program does not fit (an op that reduces or
    moves several chunks, an inplace collective, a field of a type other than the usual ints), is malformed (what
    validate_program refuses: the caller runs it to word the error) or reads a slot nobody wrote (the loop words
    that error). Where it gives the columns, the program passes validate_program: its checks are made here by
    arrays, on the fields read once for both. `base` and `sizes`: the first slot id and the size of each (rank,
    buffer); `written`: per slot id, whether it holds data at the start; `manual`: whether the ops' threadblock
    hints count."""
    ops = program.ops
    if not ops or program.collective.inplace:
        return None
    kinds, srcs, dsts, sendtbs, recvtbs, channels, lines = (list(map(attrgetter(name), ops)) for name in _OP_FIELDS)
    if kinds.count(OP_COPY) != len(kinds):
        return None
    src_rank, src_buf, src_off, src_cnt = (list(map(attrgetter(name), srcs)) for name in _SLOT_FIELDS)
    dst_rank, dst_buf, dst_off, dst_cnt = (list(map(attrgetter(name), dsts)) for name in _SLOT_FIELDS)
    if src_cnt.count(1) != len(src_cnt) or dst_cnt.count(1) != len(dst_cnt):
        return None
    if not (_plain_ints(src_rank, dst_rank, src_off, dst_off) and _plain_ints(sendtbs, recvtbs, channels, hint=True)):
        return None
    srank, drank, soff, doff = map(_ints, (src_rank, dst_rank, src_off, dst_off))
    stb, rtb, ch = map(_hints, (sendtbs, recvtbs, channels))
    ranks = program.num_ranks
    names = {name: k for k, name in enumerate(sorted({name for _, name in base}))}
    scode, dcode = _codes(names, src_buf), _codes(names, dst_buf)
    if not _valid(program, sizes, names, (srank, scode, soff), (drank, dcode, doff), (stb, rtb, ch),
                  (sendtbs, recvtbs, channels)):
        return None
    sfirst = _first_slots(base, ranks, names, srank, scode, soff)
    dfirst = _first_slots(base, ranks, names, drank, dcode, doff)
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
    after = _queues(n, sends, srank[message] * ranks + drank[message])
    if not manual:
        stb = rtb = np.full(len(ops), -1, dtype=np.int64)
    return _columns(n, kept, local, first, sends, preds, after,
                    (srank, drank, src_buf, dst_buf, soff, doff, stb, rtb, ch, _ints(lines)))


def _plain_ints(*columns: list[Any], hint: bool = False) -> bool:
    """Whether every value of the columns is an int (not a subclass; or None, for a `hint`)."""
    allowed = {int, type(None)} if hint else {int}
    return all(set(map(type, values)) <= allowed for values in columns)


def _hints(values: list[int | None]) -> np.ndarray:
    """A hint column as ints, None as -1."""
    return _ints(values if not values.count(None) else [-1 if v is None else v for v in values])


def _codes(names: dict[str, int], buffers: list[str]) -> np.ndarray:
    """Each buffer's number in `names`, -1 for a name no rank has."""
    return np.fromiter(map(names.get, buffers, [-1] * len(buffers)), dtype=np.int64, count=len(buffers))


def _valid(program: Program, sizes: dict[tuple[int, str], int], names: dict[str, int],
           src: tuple[np.ndarray, np.ndarray, np.ndarray], dst: tuple[np.ndarray, np.ndarray, np.ndarray],
           hints: tuple[np.ndarray, ...], hint_values: tuple[list[int | None], ...]) -> bool:
    """What validate_program checks of one-chunk copies, for all ops at once: each slot's rank in range and index
    inside its rank's buffer, a link between the ranks of a message, every hint None or >= 0."""
    ranks = program.num_ranks
    size = np.full((ranks, len(names) + 1), -1, dtype=np.int64)  # the last column: a buffer no rank has
    for (r, name), chunks in sizes.items():
        size[r, names[name]] = chunks
    for rank, code, index in (src, dst):
        if rank.size and (rank.min() < 0 or rank.max() >= ranks):
            return False
        if ((index < 0) | (index + 1 > size[rank, code])).any():  # (code -1: the last column)
            return False
    message = src[0] != dst[0]
    links = np.fromiter((a * ranks + b for a, b in program.topology.link_map if 0 <= a < ranks and 0 <= b < ranks),
                        dtype=np.int64)
    if not np.isin(src[0][message] * ranks + dst[0][message], links).all():
        return False
    return all(int((column < 0).sum()) == values.count(None) for column, values in zip(hints, hint_values, strict=True))


def _ints(values: list[Any]) -> np.ndarray:
    return np.fromiter(values, dtype=np.int64, count=len(values))


def _first_slots(base: dict[tuple[int, str], int], ranks: int, names: dict[str, int], rank: np.ndarray,
                 code: np.ndarray, index: np.ndarray) -> np.ndarray:
    """The slot id of each (rank, buffer, index), the buffer by its number in `names`: `base` holds each buffer's
    first."""
    first = np.zeros((ranks, len(names)), dtype=np.int64)
    for (r, name), at in base.items():
        first[r, names[name]] = at
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
             op_fields: tuple[Any, ...]) -> TracedColumns:
    """The instrs' columns from their ops' fields (per op: source and destination rank, buffer and index, the
    hints and the line): a local copy is its op's one instr, a message a send on the source rank and a
    receive on the destination rank."""
    srank, drank, src_buf, dst_buf, soff, doff, stb, rtb, ch, line = op_fields
    recvs = sends + 1
    copies = first[local]
    on_send, on_copy = kept[~local], kept[local]  # the op of each send (and its receive) and of each copy

    def per_instr(at_send: np.ndarray | int, at_recv: np.ndarray | int, at_copy: np.ndarray | int,
                  dtype: Any = np.int64) -> np.ndarray:
        column = np.empty(n, dtype=dtype)
        column[sends], column[recvs], column[copies] = at_send, at_recv, at_copy
        return column

    kind = per_instr(0, 1, 2)
    rank = per_instr(srank[on_send], drank[on_send], srank[on_copy])
    src = per_instr(soff[on_send], doff[on_send], soff[on_copy])
    dst = per_instr(soff[on_send], doff[on_send], doff[on_copy])
    sbuf, dbuf = np.asarray(src_buf, dtype=object), np.asarray(dst_buf, dtype=object)
    send_peer = per_instr(drank[on_send], -1, -1)
    recv_peer = per_instr(-1, srank[on_send], -1)
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
