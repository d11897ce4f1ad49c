"""The instruction DAG and the passes that build and rewrite it: trace_to_dag, order_messages,
aggregate_contiguous, fuse_instructions.

An `Instr` is one MSCCL-IR step before placement: a send, a receive (r / rrc), a local copy or reduce
(cpy / re), or a fused step (rcs / rrs / rrcs). Its slots are always on its own rank: `src` is what it
reads locally, `dst` what it writes locally (for a send both are the slot sent; for r/rcs both are
the slot written; for rrc/rrs/rrcs both are the receiver's own slot, the local operand). A sending
instr is matched (`send_to`) to the receiving instr on its peer.

`InstrDAG.preds` holds the same-rank dependencies found while tracing: read-after-write,
write-after-read and write-after-write on each slot (a write waits for the readers since the last
write, or for that write if nobody read it). `InstrDAG.after` holds the per-connection order: every
message between two ranks follows the previous one, on the sending side and on the receiving side
alike, so the FIFO connections see the same order at both ends. `trace_to_dag` queues messages in
program order (always feasible: every dependency of the trace points forward in program order);
`order_messages` then re-queues them in the order of a critical-path priority schedule, so that a
program written chunk by chunk still pipelines. These ordering edges are for scheduling only; they
never become waits in the IR.

Depth counts dependencies and send->receive edges as 1 and ordering edges as 0. Invariant kept by
every pass: instrs are numbered in a topological order of all three kinds of edges (after tracing,
by program position), so depths are one pass; a merge of instrs is safe when every edge between
groups still goes up in (depth, position).
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from collsynth.compiler.errors import CompileError
from collsynth.ir import (
    COPY,
    MAX_COUNT,
    RECEIVING_TYPES,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
    SENDING_TYPES,
)
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.language.program import COPY as OP_COPY
from collsynth.language.program import Program, alias_slot, initial_slots, validate_program, where

FUSED_TYPES = frozenset({RECV_COPY_SEND, RECV_REDUCE_SEND, RECV_REDUCE_COPY_SEND})


class Instr(NamedTuple):
    kind: str  # an MSCCL-IR step type
    rank: int
    src_buf: str
    src_off: int
    dst_buf: str
    dst_off: int
    cnt: int
    send_peer: int = -1
    recv_peer: int = -1
    tb_hint: int = -1  # -1: automatic
    ch_hint: int = -1
    line: int = 0

    def __str__(self) -> str:
        span = "" if self.cnt == 1 else f"x{self.cnt}"
        if self.kind in (COPY, REDUCE):
            body = f"{self.src_buf}[{self.src_off}]{span} -> {self.dst_buf}[{self.dst_off}]"
        else:
            body = f"{self.dst_buf}[{self.dst_off}]{span}"
        peers = (f" <-r{self.recv_peer}" if self.recv_peer >= 0 else "") + (
            f" ->r{self.send_peer}" if self.send_peer >= 0 else "")
        hints = (f" tb={self.tb_hint}" if self.tb_hint >= 0 else "") + (
            f" ch={self.ch_hint}" if self.ch_hint >= 0 else "")
        line = f"  # line {self.line}" if self.line else ""
        return f"r{self.rank} {self.kind:<4} {body}{peers}{hints}{line}"


@dataclass(frozen=True)
class InstrDAG:
    num_ranks: int
    instrs: tuple[Instr, ...]
    preds: tuple[tuple[int, ...], ...]  # same-rank dependencies, each < its instr
    after: tuple[tuple[int, ...], ...]  # the previous message(s) of the instr's connection(s), each < it
    send_to: tuple[int, ...]  # the matched receiving instr of each sending instr, else -1
    source: str = ""  # DSL file, for messages

    def __len__(self) -> int:
        return len(self.instrs)

    def recv_from(self) -> list[int]:
        """The matched sending instr of each receiving instr, else -1."""
        sender = [-1] * len(self.instrs)
        for i, j in enumerate(self.send_to):
            if j >= 0:
                sender[j] = i
        return sender

    def succs(self) -> list[list[int]]:
        out: list[list[int]] = [[] for _ in self.instrs]
        for i, ps in enumerate(self.preds):
            for p in ps:
                out[p].append(i)
        return out

    def where(self, i: int) -> str:
        return where(self.instrs[i].line, self.source)

    def __str__(self) -> str:
        lines = [f"instruction DAG: {len(self.instrs)} instrs on {self.num_ranks} ranks"]
        for i, ins in enumerate(self.instrs):
            after = f"  after {','.join(map(str, self.preds[i]))}" if self.preds[i] else ""
            order = f"  queued after {','.join(map(str, self.after[i]))}" if self.after[i] else ""
            to = f"  => {self.send_to[i]}" if self.send_to[i] >= 0 else ""
            lines.append(f"  {i}: {ins}{after}{order}{to}")
        return "\n".join(lines)


def depths(dag: InstrDAG, queued: bool = True) -> tuple[list[int], list[int]]:
    """Longest path from a start (depth) and to an end (reverse depth) of every instr: dependencies and
    send -> receive edges count 1, ordering edges 0 (`queued=False`: ordering edges are left out, the
    pure critical path of the data). One forward and one backward pass."""
    n = len(dag.instrs)
    preds, send_to = dag.preds, dag.send_to
    after = dag.after if queued else ((),) * n
    rdepth = [0] * n
    for i in range(n - 1, -1, -1):
        r = rdepth[i]
        j = send_to[i]
        if j >= 0 and rdepth[j] + 1 > r:
            r = rdepth[j] + 1
        rdepth[i] = r
        for p in preds[i]:
            if rdepth[p] < r + 1:
                rdepth[p] = r + 1
        for p in after[i]:
            if rdepth[p] < r:
                rdepth[p] = r
    return forward_depths(dag, queued), rdepth


def forward_depths(dag: InstrDAG, queued: bool = True) -> list[int]:
    """The depth half of `depths`."""
    n = len(dag.instrs)
    preds, send_to = dag.preds, dag.send_to
    after = dag.after if queued else ((),) * n
    depth = [0] * n
    for i in range(n):
        d = depth[i]
        for p in preds[i]:
            if depth[p] >= d:
                d = depth[p] + 1
        for p in after[i]:
            if depth[p] > d:
                d = depth[p]
        depth[i] = d
        j = send_to[i]
        if j >= 0 and depth[j] <= d:
            depth[j] = d + 1
    return depth


# --- trace_to_dag --------------------------------------------------------------------------------

def trace_to_dag(program: Program) -> InstrDAG:
    """Program -> instruction DAG: each op becomes a send + receive (or a local cpy/re) with its
    read-after-write, write-after-read and write-after-write dependencies, and each message queues
    behind the previous message between the same two ranks."""
    validate_program(program)
    coll = program.collective
    source = program.ops[0].file if program.ops else ""
    manual = program.options.threadblock_policy == "manual"  # auto placement ignores sendtb/recvtb
    # Every slot of every buffer gets an integer id: (rank, buffer) -> first id.
    base: dict[tuple[int, str], int] = {}
    total = 0
    for rank in range(program.num_ranks):
        sizes = [(INPUT, coll.input_chunks), (OUTPUT, coll.output_chunks), *program.scratch_sizes(rank).items()]
        for name, size in sizes:
            base[(rank, name)] = total
            total += size
    unwritten, initial = -2, -1
    last_writer = [unwritten] * total
    for rank, buf, index in initial_slots(coll):
        last_writer[base[(rank, buf)] + index] = initial
    readers: list[list[int] | None] = [None] * total
    last_message: dict[tuple[int, int], int] = {}  # (sender, receiver) -> index of the last send
    instrs: list[Instr] = []
    preds: list[tuple[int, ...]] = []
    after: list[tuple[int, ...]] = []
    send_to: list[int] = []

    def read(i: int, first: int, cnt: int, deps: set[int], rank: int, buf: str, off: int, line: int) -> None:
        for slot in range(first, first + cnt):
            w = last_writer[slot]
            if w >= 0:
                deps.add(w)
            elif w == unwritten:
                raise CompileError(f"{where(line, source)}reads rank {rank} {buf}[{off + slot - first}], which nobody "
                                   "wrote; copy data there first")
            rs = readers[slot]
            if rs is None:
                readers[slot] = [i]
            else:
                rs.append(i)

    def write(i: int, first: int, cnt: int, deps: set[int]) -> None:
        for slot in range(first, first + cnt):
            rs = readers[slot]
            if rs:
                deps.update(rs)  # write-after-read; the readers already follow the last write
                readers[slot] = None
            elif last_writer[slot] >= 0:
                deps.add(last_writer[slot])  # write-after-write
            last_writer[slot] = i

    for op in program.ops:
        src, dst, line = op.src, op.dst, op.line
        cnt = src.count
        sbuf, soff = alias_slot(coll, src.rank, src.buffer, src.index)
        dbuf, doff = alias_slot(coll, dst.rank, dst.buffer, dst.index)
        sfirst, dfirst = base[(src.rank, sbuf)] + soff, base[(dst.rank, dbuf)] + doff
        channel = -1 if op.channel is None else op.channel
        copying = op.op == OP_COPY
        i = len(instrs)
        deps: set[int] = set()
        if src.rank == dst.rank:
            if copying and sfirst == dfirst:
                continue
            read(i, sfirst, cnt, deps, src.rank, sbuf, soff, line)
            if not copying:
                read(i, dfirst, cnt, deps, dst.rank, dbuf, doff, line)
            write(i, dfirst, cnt, deps)
            deps.discard(i)
            instrs.append(Instr(COPY if copying else REDUCE, src.rank, sbuf, soff, dbuf, doff, cnt, -1, -1,
                                -1 if op.sendtb is None or not manual else op.sendtb, channel, line))
            preds.append(tuple(sorted(deps)))
            after.append(())
            send_to.append(-1)
            continue
        previous = last_message.get((src.rank, dst.rank))
        last_message[(src.rank, dst.rank)] = i
        read(i, sfirst, cnt, deps, src.rank, sbuf, soff, line)
        instrs.append(Instr(SEND, src.rank, sbuf, soff, sbuf, soff, cnt, dst.rank, -1,
                            -1 if op.sendtb is None or not manual else op.sendtb, channel, line))
        preds.append(tuple(sorted(deps)))
        after.append(() if previous is None else (previous,))
        send_to.append(i + 1)
        j, deps = i + 1, set()
        if not copying:
            read(j, dfirst, cnt, deps, dst.rank, dbuf, doff, line)
        write(j, dfirst, cnt, deps)
        deps.discard(j)
        instrs.append(Instr(RECV if copying else RECV_REDUCE_COPY, dst.rank, dbuf, doff, dbuf, doff, cnt, -1, src.rank,
                            -1 if op.recvtb is None or not manual else op.recvtb, channel, line))
        preds.append(tuple(sorted(deps)))
        after.append(() if previous is None else (previous + 1,))
        send_to.append(-1)
    return InstrDAG(program.num_ranks, tuple(instrs), tuple(preds), tuple(after), tuple(send_to), source)


# --- order_messages ------------------------------------------------------------------------------

ORDER_ATTEMPTS = 4  # priority schedules tried (pinning more connections each time) before program order


def order_messages(dag: InstrDAG) -> InstrDAG:
    """Re-queue the messages of every connection (pair of ranks) in the order of a critical-path list
    schedule: lowest depth first, then longest path to the end, then position; dependencies and
    send -> receive edges only, not the program's order. The receiving side takes its messages in the
    order they were sent (FIFO), so a receive can run only once it heads its connection's queue.

    Such a greedy schedule can commit a connection to an order its receiver cannot follow (a receive
    that must wait for a message queued behind it). Then the connections found blocked keep the order
    the DAG already queues them in (after tracing, program order: always feasible) and the schedule is
    retried; after ORDER_ATTEMPTS tries, every connection keeps it. The instrs come back renumbered in
    the schedule's order (a topological order of all edges, new queues included)."""
    instrs = dag.instrs
    n = len(instrs)
    pair_ids: dict[tuple[int, int], int] = {}
    send_pair, recv_pair = [-1] * n, [-1] * n
    for i, ins in enumerate(instrs):
        if ins.kind in SENDING_TYPES:
            send_pair[i] = pair_ids.setdefault((ins.rank, ins.send_peer), len(pair_ids))
        if ins.kind in RECEIVING_TYPES:
            recv_pair[i] = pair_ids.setdefault((ins.recv_peer, ins.rank), len(pair_ids))
    if not pair_ids:
        return dag
    depth, rdepth = depths(dag, queued=False)
    pinned: set[int] = set()
    order: list[int] | None = None
    for attempt in range(ORDER_ATTEMPTS + 1):
        if attempt == ORDER_ATTEMPTS:
            pinned = set(range(len(pair_ids)))
        order, blocked = _fifo_list_schedule(dag, depth, rdepth, send_pair, recv_pair, len(pair_ids), pinned)
        if order is not None:
            break
        if blocked <= pinned:
            blocked = set(range(len(pair_ids)))
        pinned |= blocked
    if order is None:  # the DAG's own queues everywhere cannot block: its edges all point forward
        raise CompileError("internal error: no message order satisfies the program's dependencies")
    if _same_queues(dag, order, send_pair, len(pair_ids)):
        return dag
    return _renumber(dag, order, send_pair, recv_pair, len(pair_ids))


def _same_queues(dag: InstrDAG, order: Sequence[int], send_pair: Sequence[int], num_pairs: int) -> bool:
    """Whether `order` sends on every connection in the order the DAG already queues (then the DAG stands;
    the receives follow the sends either way)."""
    after = dag.after
    last = [-1] * num_pairs
    for i in order:
        c = send_pair[i]
        if c >= 0:
            queued = after[i]
            if len(queued) == 1 and send_pair[queued[0]] == c:  # the usual case: a plain send
                previous = queued[0]
            else:
                previous = next((p for p in queued if send_pair[p] == c), -1)
            if previous != last[c]:
                return False
            last[c] = i
    return True


def _fifo_list_schedule(dag: InstrDAG, depth: Sequence[int], rdepth: Sequence[int], send_pair: Sequence[int],
                        recv_pair: Sequence[int], num_pairs: int,
                        pinned: set[int]) -> tuple[list[int] | None, set[int]]:
    """All instrs in priority order, receives taken per connection in the order of the sends; on the
    pinned connections the trace's (program) order is kept. (None, blocked connections) when stuck."""
    preds, after, send_to = dag.preds, dag.after, dag.send_to
    n = len(dag.instrs)
    succs: list[list[int]] = [[] for _ in range(n)]
    pending = [len(ps) for ps in preds]
    for i in range(n):
        for p in preds[i]:
            succs[p].append(i)
        j = send_to[i]
        if j >= 0:
            succs[i].append(j)
            pending[j] += 1
        if pinned:
            for p in after[i]:
                if ((send_pair[i] >= 0 and send_pair[p] == send_pair[i] and send_pair[i] in pinned)
                        or (recv_pair[i] >= 0 and recv_pair[p] == recv_pair[i] and recv_pair[i] in pinned)):
                    succs[p].append(i)
                    pending[i] += 1
    # One integer per instr orders like (depth, -reverse depth, index) and compares faster than a tuple.
    span = max(rdepth, default=0) + 1
    key = [(depth[i] * span + span - 1 - rdepth[i]) * n + i for i in range(n)]
    queues: list[deque[int]] = [deque() for _ in range(num_pairs)]
    heap = [key[i] for i in range(n) if pending[i] == 0 and recv_pair[i] < 0]
    heapq.heapify(heap)
    order: list[int] = []
    push, pop = heapq.heappush, heapq.heappop
    while heap:
        i = pop(heap) % n
        order.append(i)
        c = recv_pair[i]
        if c >= 0:  # it headed its connection's queue; the next message may now be taken
            queue = queues[c]
            queue.popleft()
            if queue and pending[queue[0]] == 0:
                push(heap, key[queue[0]])
        c = send_pair[i]
        if c >= 0:
            queues[c].append(send_to[i])
        for s in succs[i]:
            pending[s] -= 1
            if pending[s] == 0:
                c = recv_pair[s]
                if c < 0 or queues[c][0] == s:
                    push(heap, key[s])
    if len(order) < n:
        return None, {c for c in range(num_pairs) if queues[c]}
    return order, set()


def _renumber(dag: InstrDAG, order: Sequence[int], send_pair: Sequence[int], recv_pair: Sequence[int],
              num_pairs: int) -> InstrDAG:
    """The DAG with its instrs numbered in `order` and every connection queued in that order."""
    new_index = [0] * len(order)
    for k, i in enumerate(order):
        new_index[i] = k
    old_preds, old_send_to = dag.preds, dag.send_to
    preds: list[tuple[int, ...]] = []
    for i in order:
        ps = old_preds[i]
        if len(ps) == 1:
            preds.append((new_index[ps[0]],))
        else:
            preds.append(tuple(sorted([new_index[p] for p in ps])) if ps else ())
    send_to = [new_index[old_send_to[i]] if old_send_to[i] >= 0 else -1 for i in order]
    last_send, last_recv = [-1] * num_pairs, [-1] * num_pairs
    after: list[tuple[int, ...]] = []
    for k, i in enumerate(order):
        c, d = send_pair[i], recv_pair[i]
        queued: tuple[int, ...] = ()
        if c >= 0:
            if last_send[c] >= 0:
                queued = (last_send[c],)
            last_send[c] = k
        if d >= 0:
            if last_recv[d] >= 0:
                queued = tuple(sorted((*queued, last_recv[d])))
            last_recv[d] = k
        after.append(queued)
    instrs = dag.instrs
    return InstrDAG(dag.num_ranks, tuple([instrs[i] for i in order]), tuple(preds), tuple(after), tuple(send_to),
                    dag.source)


# --- contraction: merge groups of instrs into one, keeping a topological numbering ---------------

def _contract(dag: InstrDAG, merges: Sequence[tuple[Sequence[int], Instr]], depth: list[int]) -> InstrDAG:
    """Replace each group of instrs by one new instr. Every edge between groups must go up in
    (group depth, first member) - a group's depth is its first member's - so that sorting by that key
    is again a topological numbering."""
    n = len(dag.instrs)
    leader = list(range(n))
    replacement: dict[int, Instr] = {}
    members: dict[int, Sequence[int]] = {}
    for group, ins in merges:
        first = group[0] if len(group) == 2 and group[0] < group[1] else min(group)
        for m in group:
            leader[m] = first
        replacement[first] = ins
        members[first] = group
    units = [i for i in range(n) if leader[i] == i]
    units.sort(key=depth.__getitem__)  # stable: ties stay in index order
    new_index = [0] * n
    for k, u in enumerate(units):
        new_index[u] = k
    instrs: list[Instr] = []
    preds: list[tuple[int, ...]] = []
    after: list[tuple[int, ...]] = []
    send_to: list[int] = []
    old_instrs, old_send_to, old_preds, old_after = dag.instrs, dag.send_to, dag.preds, dag.after
    for k, u in enumerate(units):
        merged = members.get(u)
        if merged is None:  # a single instr: only renumber its edges
            instrs.append(old_instrs[u])
            for edges, out in ((old_preds, preds), (old_after, after)):
                ps = edges[u]
                if not ps:
                    out.append(())
                elif len(ps) == 1:
                    out.append((new_index[leader[ps[0]]],))
                else:
                    out.append(tuple(sorted({new_index[leader[p]] for p in ps})))
            j = old_send_to[u]
            send_to.append(new_index[leader[j]] if j >= 0 else -1)
        else:
            instrs.append(replacement[u])
            for edges, out in ((old_preds, preds), (old_after, after)):
                deps = {new_index[leader[p]] for m in merged for p in edges[m]}
                deps.discard(k)
                out.append(tuple(sorted(deps)))
            to = -1
            for m in merged:
                j = old_send_to[m]
                if j >= 0 and leader[j] != u:
                    to = new_index[leader[j]]
            send_to.append(to)
        for out in (preds, after):
            if out[-1] and out[-1][-1] >= k:
                raise CompileError(f"internal error: merging instructions broke the topological order at "
                                   f"{instrs[-1]}")
    return InstrDAG(dag.num_ranks, tuple(instrs), tuple(preds), tuple(after), tuple(send_to), dag.source)


# --- aggregate_contiguous ------------------------------------------------------------------------

def aggregate_contiguous(dag: InstrDAG, contiguous_io: bool = True) -> InstrDAG:
    """Merge into one step with a larger count (at most MAX_COUNT): consecutive messages on a
    connection (in its queue's order) that move contiguous chunks to contiguous chunks with the same
    step types and hints, and local copies/reductions of contiguous chunks, when they have the same
    depth (so none waits for another and merging cannot create a cycle). `contiguous_io=False` leaves
    steps on the input and output buffers alone: under interleaved replication with several instances a
    merged step would be replicated in blocks that cut across the single-chunk steps on the same chunks
    (correct, see lowering.py, but instances would then wait for each other)."""
    instrs, send_to, after = dag.instrs, dag.send_to, dag.after
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
        if ins.kind == SEND and after[i]:
            next_message[after[i][0]] = i
    for head, ins in enumerate(instrs):
        if ins.kind != SEND or after[head]:
            continue
        run, total = [head], ins.cnt
        ends = (run[0], run[0])  # the messages holding the lowest and the highest slots of the run
        k = next_message.get(head)
        while k is not None:
            side = _joins(dag, depth, ends, run[-1], k)
            if (side and total + instrs[k].cnt <= MAX_COUNT and not excluded(k)
                    and not excluded(send_to[k]) and not excluded(run[0]) and not excluded(send_to[run[0]])):
                run.append(k)
                total += instrs[k].cnt
                ends = (k, ends[1]) if side < 0 else (ends[0], k)
            else:
                if len(run) > 1:
                    _merge_messages(run, total, instrs, send_to, merges, ends[0])
                run, total, ends = [k], instrs[k].cnt, (k, k)
            k = next_message.get(k)
        if len(run) > 1:
            _merge_messages(run, total, instrs, send_to, merges, ends[0])
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
    instrs, send_to, after = dag.instrs, dag.send_to, dag.after
    ends: set[tuple[int, str, int, str, int, str]] = set()
    for i, ins in enumerate(instrs):
        if ins.kind == SEND and after[i]:
            a, b = instrs[after[i][0]], instrs[send_to[i]]
            ra = instrs[send_to[after[i][0]]]
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
    instrs, send_to = dag.instrs, dag.send_to
    sa, sb = instrs[a], instrs[b]
    ra, rb = instrs[send_to[a]], instrs[send_to[b]]
    if not (sb.kind == SEND and rb.kind == ra.kind and ra.kind in (RECV, RECV_REDUCE_COPY)
            and sb.src_buf == sa.src_buf and rb.dst_buf == ra.dst_buf
            and (sb.tb_hint, sb.ch_hint, rb.tb_hint, rb.ch_hint) == (sa.tb_hint, sa.ch_hint, ra.tb_hint, ra.ch_hint)
            and depth[a] == depth[b] and depth[send_to[a]] == depth[send_to[b]]):
        return 0
    lo, hi = instrs[ends[0]], instrs[ends[1]]
    rlo, rhi = instrs[send_to[ends[0]]], instrs[send_to[ends[1]]]
    if sb.src_off == hi.src_off + hi.cnt and rb.dst_off == rhi.dst_off + rhi.cnt:
        return 1
    if sb.src_off + sb.cnt == lo.src_off and rb.dst_off + rb.cnt == rlo.dst_off:
        return -1
    return 0


def _merge_messages(run: list[int], count: int, instrs: Sequence[Instr], send_to: Sequence[int],
                    merges: list[tuple[list[int], Instr]], lowest: int) -> None:
    s, r = instrs[lowest], instrs[send_to[lowest]]
    line = min(instrs[m].line for m in run)
    merges.append((list(run), Instr(SEND, s.rank, s.src_buf, s.src_off, s.src_buf, s.src_off, count, s.send_peer, -1,
                                    s.tb_hint, s.ch_hint, line)))
    merges.append(([send_to[m] for m in run], Instr(r.kind, r.rank, r.dst_buf, r.dst_off, r.dst_buf, r.dst_off, count,
                                                    -1, r.recv_peer, r.tb_hint, r.ch_hint, line)))


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
    instrs, preds, after = dag.instrs, dag.preds, dag.after
    succs = dag.succs()
    depth = forward_depths(dag)
    fused: dict[int, tuple[int, str]] = {}  # receive -> (send, fused kind)
    for j, rec in enumerate(instrs):
        if rec.kind != RECV and rec.kind != RECV_REDUCE_COPY:
            continue
        for s in succs[j]:
            snd = instrs[s]
            if not (snd.kind == SEND and preds[s] == (j,) and snd.src_buf == rec.dst_buf
                    and snd.src_off == rec.dst_off and snd.cnt == rec.cnt and snd.tb_hint == rec.tb_hint
                    and snd.ch_hint == rec.ch_hint):
                continue
            late = False
            for q in after[s]:
                if depth[q] > depth[j] or (depth[q] == depth[j] and q > j):
                    late = True
            if late:
                continue
            if rec.kind == RECV:
                kind = RECV_COPY_SEND
            else:
                later = succs[s]
                dead = (len(succs[j]) == 1 and len(later) == 1 and instrs[later[0]].kind == RECV
                        and instrs[later[0]].dst_buf == rec.dst_buf and instrs[later[0]].dst_off == rec.dst_off
                        and instrs[later[0]].cnt == rec.cnt)
                kind = RECV_REDUCE_SEND if dead else RECV_REDUCE_COPY_SEND
            fused[j] = (s, kind)
            break
    _unfuse_conflicts(dag, fused)
    merges: list[tuple[list[int], Instr]] = []
    for j, (s, fused_kind) in fused.items():
        rec, snd = instrs[j], instrs[s]
        merges.append(([j, s], Instr(fused_kind, rec.rank, rec.dst_buf, rec.dst_off, rec.dst_buf, rec.dst_off,
                                     rec.cnt, snd.send_peer, rec.recv_peer, rec.tb_hint, rec.ch_hint,
                                     snd.line if 0 < snd.line < rec.line else rec.line)))
    if not merges:
        return dag
    return _contract(dag, merges, depth)


def _unfuse_conflicts(dag: InstrDAG, fused: dict[int, tuple[int, str]]) -> None:
    """A chain of fused steps runs on one channel, where a rank can pair a receive peer with only one
    send peer. Walk every chain and drop the fusions that would pair a rank's peers a second way in
    the chain (or, for chains with a channel hint, on that channel)."""
    instrs, send_to = dag.instrs, dag.send_to
    fused_sends = {s for s, _ in fused.values()}
    hinted_recv: dict[tuple[int, int, int], int] = {}  # (rank, recv peer, channel hint) -> send peer
    hinted_send: dict[tuple[int, int, int], int] = {}
    for head, ins in enumerate(instrs):
        if ins.kind != SEND or head in fused_sends:
            continue
        by_recv: dict[tuple[int, int, int], int] = {}
        by_send: dict[tuple[int, int, int], int] = {}
        j = send_to[head]
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
            j = send_to[s]


def is_sending(kind: str) -> bool:
    return kind in SENDING_TYPES


def is_receiving(kind: str) -> bool:
    return kind in RECEIVING_TYPES
