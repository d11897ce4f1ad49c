"""The simulator's event loop as it was before the event queue of due times (main 42ea08b): the reference the
current `collsynth.sim.engine` loop must reproduce bit for bit (tests/sim/test_sim_engine_equivalence.py)."""

from __future__ import annotations

import heapq
import itertools
import math

from collsynth.sim.engine import STOP_MARGIN, NotFaster, Plan, RunResult
from collsynth.sim.nccl import SimError


def reference_run(plan_: Plan, slice_mb: float, ntiles: int, *, local_alpha_us: float, local_beta_us_per_mb: float,
         fifo_slots: int | None, reduce_beta_us_per_mb: float | None, stop_at: float) -> RunResult:
    steps = plan_.steps
    ntbs = len(steps)
    nsteps = [len(tb) for tb in steps]
    total = [n * ntiles for n in nsteps]
    reduce_beta = local_beta_us_per_mb if reduce_beta_us_per_mb is None else reduce_beta_us_per_mb
    # per step: what the loop reads, with the step's duration (its transfer's, or a standalone local step's)
    work = [[(st.dep_tb, st.dep_step, st.recv_conn, st.send_conn, st.link, st.switches, st.local,
              st.alpha_us + st.cnt * slice_mb * st.beta_us_per_mb if st.send_conn >= 0
              else local_alpha_us + st.cnt * slice_mb * (reduce_beta if st.reduces else local_beta_us_per_mb)
              if st.local else 0.0) for st in tb] for tb in steps]
    done = [[-1.0] * t for t in total]  # finish time of each (tile, step); -1 while unknown
    stop = stop_at * (1 + STOP_MARGIN)
    to_go = [0.0] * plan_.num_links  # per link: the transfer time of its sends not yet started
    if math.isfinite(stop):
        for tb_work in work:
            for item in tb_work:
                if item[3] >= 0:  # a send: its link, its transfer time
                    to_go[item[4]] += item[7] * ntiles
    pc = [0] * ntbs  # next (tile * nsteps + step) to run
    free = [0.0] * ntbs  # when the threadblock's previous step finished
    nconn = len(plan_.connections)
    arrivals: list[list[float]] = [[] for _ in range(nconn)]
    recv_next = [0] * nconn
    conn_waiter = [-1] * nconn
    consumed: list[list[float]] = [[] for _ in range(nconn)]  # finish times of each connection's receives
    sent = [0] * nconn
    slot_waiter = [-1] * nconn  # the sender waiting for a free slot on the connection
    slots = fifo_slots if fifo_slots is not None else -1
    dep_waiters: list[dict[int, list[int]]] = [{} for _ in range(ntbs)]  # per tb: its step -> tbs waiting
    link_free = [0.0] * plan_.num_links
    lanes = [[0.0] * b for b in plan_.switch_lanes]  # min-heaps of lane free times
    tile_end = [0.0] * ntiles
    seq = itertools.count()
    heap = [(0.0, next(seq), g) for g in range(ntbs) if total[g]]
    heapq.heapify(heap)
    push = heapq.heappush
    pop = heapq.heappop
    replace = heapq.heapreplace

    # The heap orders (time, sequence number, threadblock). Where a threadblock would be pushed at a time
    # strictly before everything in the heap, the pop that follows would return it at once: it goes on instead
    # (the same order of events, without the push and pop).
    while heap:
        t, _, g = pop(heap)
        tb_work = work[g]
        n = nsteps[g]
        end = total[g]
        done_g = done[g]
        while True:
            p = pc[g]
            if p == end:
                break
            tile, s = divmod(p, n)
            dg, dstep, rc, sc, link, switches, local, dur = tb_work[s]
            ready = free[g]
            if dg >= 0:
                di = tile * nsteps[dg] + dstep
                d = done[dg][di]
                if d < 0.0:
                    dep_waiters[dg].setdefault(di, []).append(g)
                    break
                if d > ready:
                    ready = d
            if rc >= 0:
                k = recv_next[rc]
                arrived = arrivals[rc]
                if k >= len(arrived):
                    conn_waiter[rc] = g
                    break
                if arrived[k] > ready:
                    ready = arrived[k]
            if sc >= 0 and slots >= 0 and sent[sc] >= slots:
                freed = consumed[sc]
                j = sent[sc] - slots  # this send takes the slot that receive j frees
                if j >= len(freed):
                    slot_waiter[sc] = g
                    break
                if freed[j] > ready:
                    ready = freed[j]
            if ready > t:
                if heap and ready >= heap[0][0]:
                    push(heap, (ready, next(seq), g))
                    break
                t = ready
            finish = t
            if rc >= 0:
                recv_next[rc] += 1
            if local:
                finish = t + dur
            if sc >= 0:
                sent[sc] += 1
                start = link_free[link] if link_free[link] > t else t
                for sw in switches:
                    if lanes[sw][0] > start:
                        start = lanes[sw][0]
                finish = start + dur
                link_free[link] = finish
                to_go[link] -= dur
                if finish + to_go[link] >= stop:
                    raise NotFaster(f"the makespan is at least {finish + to_go[link]} us")
                for sw in switches:
                    replace(lanes[sw], finish)
                arrivals[sc].append(finish)
                waiter = conn_waiter[sc]
                if waiter >= 0:
                    conn_waiter[sc] = -1
                    push(heap, (finish, next(seq), waiter))
            if rc >= 0:
                consumed[rc].append(finish)  # the receiving step is done with its slot
                waiter = slot_waiter[rc]
                if waiter >= 0:
                    slot_waiter[rc] = -1
                    push(heap, (finish, next(seq), waiter))
            done_g[p] = finish
            waiters = dep_waiters[g]
            if waiters:
                waiting = waiters.pop(p, None)
                if waiting:
                    for w in waiting:
                        push(heap, (finish, next(seq), w))
            free[g] = finish
            pc[g] = p + 1
            if s == n - 1 and finish > tile_end[tile]:
                tile_end[tile] = finish
            if finish > t:
                if heap and finish >= heap[0][0]:
                    push(heap, (finish, next(seq), g))
                    break
                t = finish

    stuck = [g for g in range(ntbs) if pc[g] < total[g]]
    if stuck:
        raise SimError(f"deadlock: stuck {stuck} at {[pc[g] for g in stuck]}")
    return RunResult(time_us=max(free, default=0.0), tile_end_us=tuple(tile_end),
                     step_end_us=tuple(done))
