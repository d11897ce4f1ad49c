"""schedule: all instrs in one global order by critical-path priority, within the connections' FIFO slots (see
compiler/placement.py for how the order is used)."""

from __future__ import annotations

import heapq

import numpy as np

from collsynth.compiler.errors import CompileError
from collsynth.compiler.paths import longest_paths, out_edges, renumbered_out_edges
from collsynth.compiler.placement import ChannelledDAG, Schedule
from collsynth.core.limits import FIFO_SLOTS
from collsynth.ir import RECEIVING_TYPES, SENDING_TYPES


def schedule(cdag: ChannelledDAG, slots: int | None = FIFO_SLOTS) -> Schedule:
    """List scheduling: an instr is ready when its same-rank predecessors, the message queued before it
    on its connection and (if it receives) its sender are done; among ready instrs the lowest depth
    goes first, then the one with the longest path to the end, then program order. A send waits while
    `slots` messages of its connection are in flight (None: unbounded); when only such sends are left,
    the best goes anyway and the compiler's bounded-FIFO check (collsynth.ir.deadlock) decides.

    Every edge goes up in that priority (a dependency or send -> receive raises the depth; a queue edge keeps
    it or raises it, never raises the reverse depth, and points to a later instr), so the best instr left is
    almost always ready when a scan of the priority order reaches it (see `_list_schedule`)."""
    dag = cdag.dag
    n = len(dag.instrs)
    tails, heads, weights = dag.edge_arrays()
    forward = out_edges(n, tails, heads, weights)
    depth = longest_paths(n, tails, heads, weights, forward)
    if n and depth.min() < 0:  # (only a broken pass makes one) Kahn's order stops at the cycle's first instr
        stuck = int(np.flatnonzero(depth < 0)[0])
        raise CompileError(f"{dag.where(stuck)}internal error: the instruction DAG has a cycle at {dag.instrs[stuck]}")
    rdepth = longest_paths(n, heads, tails, weights)
    # The priority (depth, -rdepth, i): each instr's rank in that order (keys are unique), sorted as one integer
    # key per instr where it fits in 62 bits (one argsort instead of a three-key lexsort).
    span = int(rdepth.max(initial=0)) + 1
    if n and (int(depth.max()) + 1) * span * n < 1 << 62:
        by_rank = np.argsort((depth * span + (span - 1 - rdepth)) * n + np.arange(n))
    else:
        by_rank = np.lexsort((np.arange(n), -rdepth, depth))
    rank_of = np.empty(n, dtype=np.int64)
    rank_of[by_rank] = np.arange(n)
    if not (rank_of[tails] < rank_of[heads]).all():
        raise CompileError("internal error: an edge of the instruction DAG goes down in the schedule's priority")
    # The list scheduler works on priority ranks (instr by_rank[p] is p there), so the heaps hold what it indexes.
    first, succ, _ = renumbered_out_edges(forward, by_rank, rank_of)
    send_conn, recv_conn, nconn = _connection_ids(cdag)
    order = _list_schedule(first.tolist(), succ.tolist(), send_conn[by_rank].tolist(), recv_conn[by_rank].tolist(),
                           [n + 1 if slots is None else slots] * nconn)
    done = by_rank[np.array(order, dtype=np.int64)] if n else np.zeros(0, dtype=np.int64)
    done.flags.writeable = False
    return Schedule(dag, tuple(done.tolist()), cdag.channel, {"order": done, "channel": cdag.channels()})


def _list_schedule(starts: list[int], targets: list[int], send_conn: list[int], recv_conn: list[int],
                   room: list[int]) -> list[int]:
    """The list schedule of `schedule`, over priority ranks (0 the best; the successors of rank p are
    targets[starts[p]:starts[p + 1]], each a higher rank), as ranks. The ready instrs are not all kept in a heap:
    since every edge goes up in priority, a scan of the priority order meets most of them when they are the best;
    only an instr the scan passed before it was ready (it waited, or a send parked on a full connection) goes into
    the heap `behind`, and the best of the scan's next ready instr and the heap's top goes next. `room`: free slots
    per connection (updated in place).

    Since every edge goes up, an instr's predecessors were all scanned before it, and those not done then are
    the ones `late`: the scan passed them while they waited, or they were parked. So only a late instr counts in
    its successors' `blocked` (and a scanned instr is ready when its count is 0): an instr done when the scan
    reaches it, the usual case, never looks at its successors."""
    n = len(send_conn)
    passed = [False] * n  # the scan went past it while it waited for a predecessor
    late = [False] * n  # scanned and not done at once: its successors count it in `blocked` until it is done
    blocked = [0] * n  # per instr, its late predecessors not yet done (an edge counts once per edge)
    behind: list[int] = []  # ready instrs the scan already passed, a heap
    parked: dict[int, list[int]] = {}  # ready sends of a full connection, a heap each
    push, pop = heapq.heappush, heapq.heappop
    order: list[int] = []
    done = order.append
    at = 0  # the scan: every instr from `at` on that is ready is in no heap
    while True:
        forced = False
        while at < n and blocked[at]:  # the scan skips (and marks) instrs still waiting
            passed[at] = late[at] = True
            for s in targets[starts[at]:starts[at + 1]]:
                blocked[s] += 1
            at += 1
        if behind and (at == n or behind[0] < at):
            i = pop(behind)
        elif at < n:
            i = at
            at += 1
        elif parked:  # every ready instr sends on a full connection: no order within the slots exists from here
            sent = min(parked, key=lambda c: parked[c][0])
            i = pop(parked[sent])
            if not parked[sent]:
                del parked[sent]
            forced = True
        else:
            return order
        sent = send_conn[i]
        if sent >= 0 and room[sent] <= 0 and not forced:
            push(parked.setdefault(sent, []), i)
            if not late[i]:
                late[i] = True
                for s in targets[starts[i]:starts[i + 1]]:
                    blocked[s] += 1
            continue
        done(i)
        received = recv_conn[i]
        if received >= 0:
            room[received] += 1
            if parked:
                waiting = parked.get(received)
                if waiting:  # one slot freed: the best send parked on it gets another look
                    push(behind, pop(waiting))
                    if not waiting:
                        del parked[received]
        if sent >= 0:
            room[sent] -= 1
        if late[i]:
            for s in targets[starts[i]:starts[i + 1]]:
                left = blocked[s] - 1
                blocked[s] = left
                if not left and passed[s]:
                    push(behind, s)


def _connection_ids(cdag: ChannelledDAG) -> tuple[np.ndarray, np.ndarray, int]:
    """Per instr, the number of the connection (sender rank, receiver rank, channel) it sends on and of the one
    it receives from (-1 where it does not), and how many connections there are."""
    dag = cdag.dag
    n = len(dag.instrs)
    code = dag.is_kind(RECEIVING_TYPES) | 2 * dag.is_kind(SENDING_TYPES)
    rank, send_peer, recv_peer = (dag.values(name) + 1 for name in ("rank", "send_peer", "recv_peer"))  # -1 -> 0
    channel = cdag.channels() + 1
    ranks, channels = cdag.dag.num_ranks + 1, int(channel.max(initial=0)) + 1
    sending, receiving = np.flatnonzero(code & 2), np.flatnonzero(code & 1)
    keys = np.concatenate([(rank[sending] * ranks + send_peer[sending]) * channels + channel[sending],
                           (recv_peer[receiving] * ranks + rank[receiving]) * channels + channel[receiving]])
    span = ranks * ranks * channels  # every key is below it
    if span <= 4 * keys.size + (1 << 20):  # np.unique's numbers without its sort: by a count over the keys' range
        present = np.bincount(keys, minlength=span) > 0
        number, unique = (np.cumsum(present) - 1)[keys], np.flatnonzero(present)
    else:
        unique, number = np.unique(keys, return_inverse=True)
    sends, recvs = np.full(n, -1, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    sends[sending], recvs[receiving] = number[:sending.size], number[sending.size:]
    return sends, recvs, int(unique.size)
