"""Cross-instance waits of replicate_instances (see collsynth.compiler.lowering's docstring): with interleaved
instances, steps of different counts over the same chunks overlap across instances, so a step also waits for
the steps of other instances that touched its positions before it."""

from __future__ import annotations

from itertools import chain, islice, repeat
from operator import itemgetter

import numpy as np

from collsynth.compiler.deps import Waits
from collsynth.compiler.placement import Placement
from collsynth.ir import (
    COPY,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
)

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
    instances; without any (the usual case) this is empty at once.
    The accesses are replayed in order, (instr, instance), its reads before its write, all at once (numpy): every
    access of every position of a traced buffer, sorted by buffer, position and that order; then a read meets the
    write before it, and a write the reads since the write before it, else that write."""
    dag = placement.dag
    if copies == 1 or not interleaved:
        return {}
    cnts = dag.values("cnt")
    if not np.any(cnts != 1):
        return {}
    # A buffer that only one-chunk steps touch has instance k's parts at positions k (mod copies) alone: no
    # other instance touches them, so its positions are not traced.
    kinds, ranks = dag.column("kind"), dag.column("rank")
    src_bufs, dst_bufs = dag.column("src_buf"), dag.column("dst_buf")
    tables: dict[tuple[int, str], int] = {}
    for rank, cnt, src, dst in zip(ranks, cnts.tolist(), src_bufs, dst_bufs, strict=True):
        if cnt > 1:
            tables.setdefault((rank, src), len(tables))
            tables.setdefault((rank, dst), len(tables))
    spec: list[tuple[int, int, int, int]] = []  # (instr, buffer, first position, write): reads first
    src_offs, dst_offs = dag.column("src_off"), dag.column("dst_off")
    for i, (kind, rank, src, dst) in enumerate(zip(kinds, ranks, src_bufs, dst_bufs, strict=True)):
        src_table, dst_table = tables.get((rank, src)), tables.get((rank, dst))
        if src_table is not None and kind in _READS_SRC:
            spec.append((i, src_table, src_offs[i] * copies, 0))
        if dst_table is not None:
            if kind in _READS_DST:
                spec.append((i, dst_table, dst_offs[i] * copies, 0))
            if kind in _WRITES_DST:
                spec.append((i, dst_table, dst_offs[i] * copies, 1))
    if not spec:
        return {}
    instr, table, first, write = np.array(spec, dtype=np.int64).T
    cnt = cnts[instr]
    k = np.tile(np.arange(copies), instr.size)  # every spec per instance, then every position of it
    instr, table, write, cnt = (np.repeat(column, copies) for column in (instr, table, write, cnt))
    first = np.repeat(first, copies) + k * cnt
    each = np.repeat(np.arange(instr.size), cnt)
    pos = first[each] + np.arange(each.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)
    order = np.lexsort(((instr[each] * copies + k[each]) * 2 + write[each], pos, table[each]))
    pos, each = pos[order], each[order]
    start = np.ones(each.size, dtype=bool)  # first access of its (buffer, position)
    start[1:] = (pos[1:] != pos[:-1]) | (table[each[1:]] != table[each[:-1]])
    group_first = np.maximum.accumulate(np.where(start, np.arange(each.size), 0))
    is_write = write[each] == 1
    seen = np.maximum.accumulate(np.where(is_write, np.arange(each.size), -1))
    last = np.full(each.size, -1, dtype=np.int64)  # the write before each access, in its group
    last[1:] = seen[:-1]
    last[last < group_first] = -1
    read_at = np.flatnonzero(~is_write & (last >= 0))  # a read after a write
    behind = np.flatnonzero(is_write)
    behind = behind[(behind - np.maximum(last[behind], group_first[behind] - 1) == 1) & (last[behind] >= 0)]
    nxt = np.minimum.accumulate(np.where(is_write, np.arange(each.size), each.size)[::-1])[::-1]
    reader = np.flatnonzero(~is_write)  # a read before a write: its next one in its group
    reader = reader[nxt[reader] < each.size]
    reader = reader[group_first[nxt[reader]] == group_first[reader]]
    me = np.concatenate([read_at, behind, nxt[reader]])
    other = np.concatenate([last[read_at], last[behind], reader])
    me, other = each[me], each[other]
    me_k, other_k = k[me], k[other]
    keep = me_k != other_k
    rows = np.unique(np.stack([instr[me], me_k, instr[other], other_k], axis=1)[keep], axis=0)
    found: dict[Access, list[Access]] = {}
    for a, b, c, d in rows.tolist():
        found.setdefault((a, b), []).append((c, d))
    return {access: tuple(others) for access, others in found.items()}


def instance_waits(placement: Placement, waits: tuple[tuple[tuple[Waits, ...], ...], ...], copies: int,
                   cross: dict[Access, tuple[Access, ...]], new_ids: list[list[int]]) -> list[tuple[Waits, ...]]:
    """Where instances overlap (`cross` not empty): the waits of every step of every threadblock instance (placed
    threadblock t of rank r, instance k: number (first(r) + t) * copies + k, first(r) the placed threadblocks of
    the ranks before r), as `uncovered` keeps them step after step: the instance's own waits (threadblock dt of
    instance k is dt * copies + k) and the cross-instance ones, the latest per waited threadblock instance, less
    those an earlier step of the same threadblock instance waited for already (at that step or later), in the
    order of the waited threadblock instance's number, that number then renamed by its rank's `new_ids`.
    All steps at once (numpy): a step keeps its wait for (T, d) iff d is above every d' of (T, d') that an earlier
    step of its threadblock instance has among its own (a wait not kept is at or below one kept before it)."""
    ntbs = [len(rank_waits) for rank_waits in waits]
    rank_first = np.zeros(len(ntbs) + 1, dtype=np.int64)  # per rank: its first placed threadblock (global)
    np.cumsum(ntbs, out=rank_first[1:])
    lengths = np.fromiter(map(len, chain.from_iterable(waits)), dtype=np.int64, count=int(rank_first[-1]))
    step_waits = tuple(chain.from_iterable(chain.from_iterable(waits)))  # per step, in (rank, tb, step) order
    tb_first = np.zeros(lengths.size + 1, dtype=np.int64)
    np.cumsum(lengths, out=tb_first[1:])
    step_tb = np.repeat(np.arange(lengths.size), lengths)
    counts = np.fromiter(map(len, step_waits), dtype=np.int64, count=len(step_waits))
    pairs = tuple(chain.from_iterable(step_waits))
    waiting = np.repeat(np.arange(len(step_waits)), counts)
    wtb = step_tb[waiting]
    base = np.repeat(rank_first[:-1], ntbs)[wtb]  # the waiting threadblock's rank's first threadblock
    own_dt = np.fromiter(map(_FIRST, pairs), dtype=np.int64, count=len(pairs))
    ks = np.arange(copies)[:, None]
    g = [(wtb * copies + ks).ravel()]  # every instance of every own wait
    j = [np.tile(waiting - tb_first[wtb], copies)]
    t = [((base + own_dt) * copies + ks).ravel()]
    d = [np.tile(np.fromiter(map(_SECOND, pairs), dtype=np.int64, count=len(pairs)), copies)]
    others = tuple(chain.from_iterable(cross.values()))
    if others:
        me = np.repeat(np.array(list(cross), dtype=np.int64).reshape(-1, 2), list(map(len, cross.values())), axis=0)
        them = np.array(others, dtype=np.int64).reshape(-1, 2)
        rank = placement.dag.values("rank")
        for (i, k), out_g, out_j in ((me.T, g, j), (them.T, t, d)):
            out_g.append((rank_first[rank[i]] + placement.tb_of[i]) * copies + k)
            out_j.append(placement.step_of[i])
    g_, j_, t_, d_ = (np.concatenate(parts) for parts in (g, j, t, d))
    order = np.lexsort((d_, j_, t_, g_))  # by threadblock instance, waited one, step, waited step
    g_, j_, t_, d_ = g_[order], j_[order], t_[order], d_[order]
    last = np.ones(g_.size, dtype=bool)  # the latest wait of a step per waited threadblock instance
    last[:-1] = (g_[1:] != g_[:-1]) | (t_[1:] != t_[:-1]) | (j_[1:] != j_[:-1])
    g_, j_, t_, d_ = g_[last], j_[last], t_[last], d_[last]
    group = np.ones(g_.size, dtype=bool)  # first of its (threadblock instance, waited one)
    group[1:] = (g_[1:] != g_[:-1]) | (t_[1:] != t_[:-1])
    floor = min(int(d_.min(initial=0)), -1)
    span = int(d_.max(initial=0)) - floor + 1
    number = np.cumsum(group)
    running = np.maximum.accumulate(number * span + (d_ - floor))  # per group: the latest waited step so far
    before = np.full(g_.size, -1, dtype=np.int64)
    before[1:] = running[:-1] - number[1:] * span + floor
    kept = d_ > np.where(group, -1, np.maximum(before, -1))
    g_, j_, t_, d_ = g_[kept], j_[kept], t_[kept], d_[kept]
    order = np.lexsort((t_, j_, g_))
    g_, j_, t_, d_ = g_[order], j_[order], t_[order], d_[order]
    inst_first = np.zeros(lengths.size * copies + 1, dtype=np.int64)  # per threadblock instance: its first step
    np.cumsum(np.repeat(lengths, copies), out=inst_first[1:])
    per_step = np.bincount(inst_first[g_] + j_, minlength=int(inst_first[-1])).tolist()
    renamed = np.concatenate([np.asarray(ids, dtype=np.int64) for ids in new_ids])[t_] if t_.size else t_
    kept_pairs = iter(zip(renamed.tolist(), d_.tolist(), strict=True))
    flat = tuple(map(tuple, map(islice, repeat(kept_pairs), per_step)))
    bounds = inst_first.tolist()
    return [flat[at:end] for at, end in zip(bounds[:-1], bounds[1:], strict=True)]


_FIRST, _SECOND = itemgetter(0), itemgetter(1)
