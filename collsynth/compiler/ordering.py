"""order_messages: re-queue each connection's messages in the order of a critical-path priority schedule
(see compiler/dag.py for the DAG's invariants)."""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence

from collsynth.compiler.dag import InstrDAG, Renumbering, depths, edge_columns
from collsynth.compiler.errors import CompileError
from collsynth.ir import (
    RECEIVING_TYPES,
    SENDING_TYPES,
)

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
    instrs = dag.instrs
    last = [-1] * num_pairs
    for i in order:
        c = send_pair[i]
        if c >= 0:
            queued = instrs[i].after
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
    n = len(dag.instrs)
    preds, after, send_to = edge_columns(dag)
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
    return dag.renumbered(Renumbering(len(order), order), [instrs[i] for i in order], after)
