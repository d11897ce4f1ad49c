"""The passes that merge instrs of the DAG: aggregate_contiguous (contiguous messages and local ops into one)
and fuse_instructions (relays and reductions into rcs/rrs/rrcs); both contract the DAG with `_contract`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from collsynth.compiler.dag import Instr, InstrDAG, Renumbering, dependents, forward_depths, instr_of_fields
from collsynth.compiler.errors import CompileError
from collsynth.ir import (
    COPY,
    MAX_COUNT,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
)
from collsynth.language.buffers import INPUT, OUTPUT


def _contract(dag: InstrDAG, merges: Sequence[tuple[Sequence[int], Instr]], depth: list[int]) -> InstrDAG:
    """Replace each group of instrs by one new instr. Every edge between groups must go up in
    (group depth, first member) - a group's depth is its first member's - so that sorting by that key
    is again a topological numbering."""
    n = len(dag.instrs)
    merged = [False] * n
    replacement: dict[int, Instr] = {}
    groups: dict[int, Sequence[int]] = {}
    for group, ins in merges:
        first = group[0] if len(group) == 2 and group[0] < group[1] else min(group)
        for m in group:
            merged[m] = True
        replacement[first] = ins
        groups[first] = group
    units = [i for i in range(n) if not merged[i] or i in groups]
    units.sort(key=depth.__getitem__)  # stable: ties stay in index order
    old = dag.instrs
    contracted = dag.renumbered(Renumbering(n, units, groups), [replacement.get(u) or old[u] for u in units])
    for k, ins in enumerate(contracted.instrs):
        if ins.preds and ins.preds[-1] >= k or ins.after and ins.after[-1] >= k:
            raise CompileError(f"internal error: merging instructions broke the topological order at {ins}")
    return contracted


# --- aggregate_contiguous ------------------------------------------------------------------------

def aggregate_contiguous(dag: InstrDAG, contiguous_io: bool = True, either_end: bool = True) -> InstrDAG:
    """Merge into one step with a larger count (at most MAX_COUNT): consecutive messages on a
    connection (in its queue's order) that move contiguous chunks to contiguous chunks with the same
    step types and hints, and local copies/reductions of contiguous chunks, when they have the same
    depth (so none waits for another and merging cannot create a cycle). `contiguous_io=False` leaves
    steps on the input and output buffers alone: under interleaved replication with several instances a
    merged step would be replicated in blocks that cut across the single-chunk steps on the same chunks
    (correct, see lowering.py, but instances would then wait for each other). `either_end=False`: a run of
    messages grows only upwards (a later-queued message with lower slots starts a new run)."""
    instrs = dag.instrs
    if not _has_candidates(dag):
        return dag
    depth = forward_depths(dag)
    io = (INPUT, OUTPUT)

    def excluded(i: int) -> bool:
        ins = instrs[i]
        return not contiguous_io and (ins.src_buf in io or ins.dst_buf in io)

    merges: list[tuple[list[int], Instr]] = []
    # Messages: runs along each connection's queue (it starts at a send queued behind nothing).
    next_message: dict[int, int] = {}
    for i, ins in enumerate(instrs):
        if ins.kind == SEND and ins.after:
            next_message[ins.after[0]] = i
    for head, ins in enumerate(instrs):
        if ins.kind != SEND or ins.after:
            continue
        run, total = [head], ins.cnt
        ends = (run[0], run[0])  # the messages holding the lowest and the highest slots of the run
        k = next_message.get(head)
        while k is not None:
            side = _joins(dag, depth, ends, run[-1], k)
            if side < 0 and not either_end:
                side = 0
            if (side and total + instrs[k].cnt <= MAX_COUNT and not excluded(k)
                    and not excluded(instrs[k].send_to) and not excluded(run[0])
                    and not excluded(instrs[run[0]].send_to)):
                run.append(k)
                total += instrs[k].cnt
                ends = (k, ends[1]) if side < 0 else (ends[0], k)
            else:
                if len(run) > 1:
                    _merge_messages(run, total, instrs, merges, ends[0])
                run, total, ends = [k], instrs[k].cnt, (k, k)
            k = next_message.get(k)
        if len(run) > 1:
            _merge_messages(run, total, instrs, merges, ends[0])
    # Local copies and reductions: contiguous runs among those of equal depth and kind.
    groups: dict[tuple, list[int]] = {}
    for i, ins in enumerate(instrs):
        if ins.kind in (COPY, REDUCE) and not excluded(i):
            groups.setdefault((ins.rank, ins.kind, ins.src_buf, ins.dst_buf, ins.tb_hint, ins.ch_hint, depth[i]),
                              []).append(i)
    for members in groups.values():
        if len(members) < 2:
            continue
        members.sort(key=lambda i: instrs[i].src_off)
        run, total = [members[0]], instrs[members[0]].cnt
        for i in members[1:]:
            last, ins = instrs[run[-1]], instrs[i]
            if (ins.src_off == last.src_off + last.cnt and ins.dst_off == last.dst_off + last.cnt
                    and total + ins.cnt <= MAX_COUNT):
                run.append(i)
                total += ins.cnt
                continue
            _merge_local(run, total, instrs, merges)
            run, total = [i], ins.cnt
        _merge_local(run, total, instrs, merges)
    if not merges:
        return dag
    return _contract(dag, merges, depth)


def _has_candidates(dag: InstrDAG) -> bool:
    """Whether any two messages or local steps could merge at all (contiguous slots), before depths."""
    instrs = dag.instrs
    ends: set[tuple[int, str, int, str, int, str]] = set()
    for ins in instrs:
        if ins.kind == SEND and ins.after:
            a, b = instrs[ins.after[0]], instrs[ins.send_to]
            ra = instrs[a.send_to]
            if a.kind == SEND and ins.src_buf == a.src_buf and (
                    ins.src_off == a.src_off + a.cnt and b.dst_off == ra.dst_off + a.cnt
                    or ins.src_off + ins.cnt == a.src_off and b.dst_off + ins.cnt == ra.dst_off):
                return True
        elif ins.kind in (COPY, REDUCE):
            ends.add((ins.rank, ins.kind, ins.src_off + ins.cnt, ins.src_buf, ins.dst_off + ins.cnt, ins.dst_buf))
    return any((ins.rank, ins.kind, ins.src_off, ins.src_buf, ins.dst_off, ins.dst_buf) in ends
               for ins in instrs if ins.kind in (COPY, REDUCE))


def _joins(dag: InstrDAG, depth: Sequence[int], ends: tuple[int, int], a: int, b: int) -> int:
    """Whether message b (queued right after message a, the last of a run whose lowest and highest slots
    `ends` hold) can be merged into the run's transfer: 1 when b's slots follow the run's at both ends,
    -1 when they precede them at both ends (a run may grow either way: one step's chunks are one
    transfer whatever order the connection queues them in), 0 when not."""
    instrs = dag.instrs
    sa, sb = instrs[a], instrs[b]
    ra, rb = instrs[sa.send_to], instrs[sb.send_to]
    if not (sb.kind == SEND and rb.kind == ra.kind and ra.kind in (RECV, RECV_REDUCE_COPY)
            and sb.src_buf == sa.src_buf and rb.dst_buf == ra.dst_buf
            and (sb.tb_hint, sb.ch_hint, rb.tb_hint, rb.ch_hint) == (sa.tb_hint, sa.ch_hint, ra.tb_hint, ra.ch_hint)
            and depth[a] == depth[b] and depth[sa.send_to] == depth[sb.send_to]):
        return 0
    lo, hi = instrs[ends[0]], instrs[ends[1]]
    rlo, rhi = instrs[lo.send_to], instrs[hi.send_to]
    if sb.src_off == hi.src_off + hi.cnt and rb.dst_off == rhi.dst_off + rhi.cnt:
        return 1
    if sb.src_off + sb.cnt == lo.src_off and rb.dst_off + rb.cnt == rlo.dst_off:
        return -1
    return 0


def _merge_messages(run: list[int], count: int, instrs: Sequence[Instr], merges: list[tuple[list[int], Instr]],
                    lowest: int) -> None:
    s, r = instrs[lowest], instrs[instrs[lowest].send_to]
    line = min(instrs[m].line for m in run)
    merges.append((list(run), Instr(SEND, s.rank, s.src_buf, s.src_off, s.src_buf, s.src_off, count, s.send_peer, -1,
                                    s.tb_hint, s.ch_hint, line)))
    merges.append(([instrs[m].send_to for m in run], Instr(r.kind, r.rank, r.dst_buf, r.dst_off, r.dst_buf, r.dst_off,
                                                           count, -1, r.recv_peer, r.tb_hint, r.ch_hint, line)))


def _merge_local(run: list[int], count: int, instrs: Sequence[Instr], merges: list[tuple[list[int], Instr]]) -> None:
    if len(run) < 2:
        return
    first = instrs[run[0]]
    merges.append((list(run), Instr(first.kind, first.rank, first.src_buf, first.src_off, first.dst_buf, first.dst_off,
                                    count, -1, -1, first.tb_hint, first.ch_hint, min(instrs[m].line for m in run))))


# --- fuse_instructions ---------------------------------------------------------------------------

def fuse_instructions(dag: InstrDAG) -> InstrDAG:
    """r + s -> rcs; rrc + s -> rrcs; rrc + s + r -> rrs (the reduced value is only forwarded, then
    overwritten). The send must read exactly the slot the receive wrote and nothing else, with the
    same count and the same threadblock/channel hints, and the message queued before it on its
    connection must not come later than the receive (the fused step sends when it receives)."""
    instrs = dag.instrs
    receives = _fusable_receives(dag)
    if not receives:  # (the usual case with manual threadblocks: a relay's receive and send carry two hints)
        return dag
    first, targets = dependents(dag)
    depth = forward_depths(dag)
    fused: dict[int, tuple[int, str]] = {}  # receive -> (send, fused kind)
    for j in receives:
        rec = instrs[j]
        for s in targets[first[j]:first[j + 1]]:
            snd = instrs[s]
            if not (snd.kind == SEND and snd.preds == (j,) and snd.src_buf == rec.dst_buf
                    and snd.src_off == rec.dst_off and snd.cnt == rec.cnt and snd.tb_hint == rec.tb_hint
                    and snd.ch_hint == rec.ch_hint):
                continue
            late = False
            for q in snd.after:
                if depth[q] > depth[j] or (depth[q] == depth[j] and q > j):
                    late = True
            if late:
                continue
            if rec.kind == RECV:
                kind = RECV_COPY_SEND
            else:
                later = targets[first[s]:first[s + 1]]
                dead = (first[j + 1] - first[j] == 1 and len(later) == 1 and instrs[later[0]].kind == RECV
                        and instrs[later[0]].dst_buf == rec.dst_buf and instrs[later[0]].dst_off == rec.dst_off
                        and instrs[later[0]].cnt == rec.cnt)
                kind = RECV_REDUCE_SEND if dead else RECV_REDUCE_COPY_SEND
            fused[j] = (s, kind)
            break
    _unfuse_conflicts(dag, fused)
    merges: list[tuple[list[int], Instr]] = []
    for j, (s, fused_kind) in fused.items():
        rec, snd = instrs[j], instrs[s]
        line = snd.line if 0 < snd.line < rec.line else rec.line
        merges.append(([j, s], instr_of_fields((fused_kind, rec.rank, rec.dst_buf, rec.dst_off, rec.dst_buf,
                                                rec.dst_off, rec.cnt, snd.send_peer, rec.recv_peer, rec.tb_hint,
                                                rec.ch_hint, line, (), (), -1))))
    if not merges:
        return dag
    return _contract(dag, merges, depth)


def _fusable_receives(dag: InstrDAG) -> list[int]:
    """The receives (r, rrc) that a send could fuse with, in increasing order: a send whose only dependency is
    the receive, reading exactly the slots it wrote, with the same count and hints (fuse_instructions looks at
    no other receive; a receive none of whose dependents passes these tests never fuses)."""
    count, flat = dag.edge_csr("preds")
    sends = np.flatnonzero(dag.is_kind({SEND}) & (count == 1))
    if not sends.size:
        return []
    only = flat[(np.cumsum(count) - count)[sends]]  # each such send's one dependency
    same = dag.is_kind({RECV, RECV_REDUCE_COPY})[only]
    for mine, theirs in (("tb_hint", "tb_hint"), ("src_off", "dst_off"), ("cnt", "cnt"), ("ch_hint", "ch_hint")):
        same &= dag.values(mine)[sends] == dag.values(theirs)[only]
    instrs = dag.instrs
    return sorted({j for s, j in zip(sends[same].tolist(), only[same].tolist(), strict=True)
                   if instrs[s].src_buf == instrs[j].dst_buf})


def _unfuse_conflicts(dag: InstrDAG, fused: dict[int, tuple[int, str]]) -> None:
    """A chain of fused steps runs on one channel, where a rank can pair a receive peer with only one
    send peer. Walk every chain and drop the fusions that would pair a rank's peers a second way in
    the chain (or, for chains with a channel hint, on that channel)."""
    instrs = dag.instrs
    fused_sends = {s for s, _ in fused.values()}
    hinted_recv: dict[tuple[int, int, int], int] = {}  # (rank, recv peer, channel hint) -> send peer
    hinted_send: dict[tuple[int, int, int], int] = {}
    for head, ins in enumerate(instrs):
        if ins.kind != SEND or head in fused_sends:
            continue
        by_recv: dict[tuple[int, int, int], int] = {}
        by_send: dict[tuple[int, int, int], int] = {}
        j = ins.send_to
        while j in fused:
            s, _ = fused[j]
            rank, src, dst, ch = instrs[j].rank, instrs[j].recv_peer, instrs[s].send_peer, instrs[j].ch_hint
            if (by_recv.get((rank, src, ch), dst) != dst or by_send.get((rank, dst, ch), src) != src
                    or hinted_recv.get((rank, src, ch), dst) != dst or hinted_send.get((rank, dst, ch), src) != src):
                del fused[j]  # the chain ends at this receive; its send starts a new one
                by_recv, by_send = {}, {}
            else:
                by_recv[(rank, src, ch)] = dst
                by_send[(rank, dst, ch)] = src
                if ch >= 0:
                    hinted_recv[(rank, src, ch)] = dst
                    hinted_send[(rank, dst, ch)] = src
            j = instrs[s].send_to
