"""Discrete-event alpha-beta timing of an MSCCL-IR program on a topology.

The model (what a threadblock, a connection, a link and a switch do):

- Every threadblock runs its steps in order, tile after tile (the MSCCL loop: `for tile: for step`). A step
  starts when the threadblock's previous step has finished, its dependency `(depid, deps)` of the same tile
  has finished, and -- for a receiving step -- the matching message has arrived.
- One FIFO connection per (sender, receiver, channel): the k-th receive of a connection takes the k-th
  message sent on it. The connection holds `fifo_slots` messages (MSCCL/NCCL's NCCL_STEPS = 8 slots,
  `FIFO_SLOTS`): the k-th send on it cannot start before the receiving step that took message k - 8 has
  finished (that step is done with the slot; for rcs/rrs/rrcs this is when its own send has arrived).
  A slot here is one send of one tile, whatever its `cnt`. In MSCCL a slot is buffSize/8 bytes and the
  per-tile chunk is sized so that LL and LL128 tiles fill one slot each (the tile sizes in
  `collsynth.sim.simulate`), while a Simple tile is MSCCL_CHUNKSTEPS = 4 slots of 512 KiB; a real Simple
  connection therefore holds only two one-chunk tile sends (it streams the rest slot by slot, which
  this model's all-at-once transfers cannot express), so for Simple 8 whole sends is a lenient bound.
  `fifo_slots=None` restores eager sends (unbounded buffering).
- A sending step (s, rcs, rrs, rrcs) puts one transfer of `cnt` chunk-slices on the link (sender -> peer).
  The transfer costs `alpha + MB * beta` and holds the link for all of that time, so transfers that share
  a link serialize, first come (by ready time) first served. The sending threadblock is busy until its
  transfer has arrived (the GPU's threads do the copy), and the receive it matches can complete at the
  arrival time.
- Protocol (`collsynth.sim.protocol`, the IR's `proto`): the link's `alpha_us` / `beta_us_per_mb` are the
  Simple protocol's. LL and LL128 scale alpha by NCCL's per-hop latency ratio for the link's hardware
  class (tuning.cc hwLat, Ring: NVLink LL .47 / LL128 1.9 / Simple 3.4 us; PCI 1.0 / 2.5 / 5.7; network
  2.7 / 4.0 / 9.6) and divide beta by the data fraction of a line (LL 8/16, LL128 120/128). Simple is
  unchanged bit for bit. The protocol also sets the tile size (`collsynth.sim.simulate`).
- A switch with bandwidth b is b lanes shared by all of its links: a transfer on one of its links also
  holds one lane (the earliest free) for its duration, and runs no faster than `switch.beta_us_per_mb`.
- Reductions fused into a receive (rrc, rrs, rrcs) and plain receives (r) cost nothing beyond the
  transfer (the reduction streams with the data). Standalone local steps cost
  `local_alpha_us + MB * beta` per tile, beta `local_beta_us_per_mb` for cpy and `reduce_beta_us_per_mb` for re
  (collsynth.core.costs, the one table the exporters share); nop costs nothing.

The size-independent planning (`plan`) is in `collsynth.sim.planning`; here is the one event loop (`run`), driven by
a queue of due times.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import NamedTuple

from collsynth.core.collector import paused_collector
from collsynth.sim.nccl import SimError
from collsynth.sim.planning import Plan, PlannedStep, plan  # noqa: F401  (the engine's API: plan, then run)
from collsynth.sim.snapshot import Snapshot, fresh, restore, take
from collsynth.sim.stuck import Waits, describe_stuck

# MSCCL/NCCL's per-connection FIFO depth (NCCL_STEPS): sends in flight before the receiver must catch up.
FIFO_SLOTS = 8


@dataclass(frozen=True)
class RunResult:
    """One simulated run: the makespan, when each tile's last step finished and, per threadblock, when each of
    its (tile, step) finished (index `tile * steps + step`; the steady-state search in `simulate` reads it)."""

    time_us: float
    tile_end_us: tuple[float, ...]
    step_end_us: tuple[list[float], ...] = ()  # the event loop's own lists (not copied): read, don't change
    snapshot: Snapshot | None = None  # run(keep_for=N): the state the run of N tiles goes on from


class NotFaster(Exception):  # noqa: N818 - a verdict, not a failure: the caller asked to stop here
    """Raised by `run(..., stop_at=T)` once the makespan is proved to be at least T (the run is cut short)."""


# What a proof that the makespan reaches stop_at must clear: the running sums of transfer times round
# differently from the event loop's own, so a bound is trusted only this far (relative) past stop_at.
STOP_MARGIN = 1e-9


def run(plan_: Plan, slice_mb: float, ntiles: int, *, local_alpha_us: float, local_beta_us_per_mb: float,
        fifo_slots: int | None = FIFO_SLOTS, reduce_beta_us_per_mb: float | None = None,
        stop_at: float = math.inf, keep_for: int = 0, resume: Snapshot | None = None) -> RunResult:
    """Simulate `ntiles` tiles in which each chunk slice is `slice_mb` MB; return the makespan.

    `fifo_slots`: sends a connection holds before its receiver consumes them (None: unbounded). `stop_at`:
    raise NotFaster as soon as the makespan is proved to be at least that (a link's sends run one at a time,
    so the makespan is at least when the link is next free plus every transfer still to go on it); a run
    that is not stopped is the same run as without it. The cyclic garbage collector is paused meanwhile: the
    loop allocates a list per queued time and frees nothing cyclic.

    `keep_for=N` (> ntiles): this run is a probe for a run of N tiles with `stop_at`, which goes on from the
    result's `snapshot` (`resume=`) instead of simulating this run's events again (collsynth.sim.snapshot: the
    same run bit for bit, and the same verdict); the probe itself is not stopped."""
    with paused_collector():
        return _run(plan_, slice_mb, ntiles, local_alpha_us=local_alpha_us,
                    local_beta_us_per_mb=local_beta_us_per_mb, fifo_slots=fifo_slots,
                    reduce_beta_us_per_mb=reduce_beta_us_per_mb, stop_at=stop_at, keep_for=keep_for, resume=resume)


def _run(plan_: Plan, slice_mb: float, ntiles: int, *, local_alpha_us: float, local_beta_us_per_mb: float,
         fifo_slots: int | None, reduce_beta_us_per_mb: float | None, stop_at: float, keep_for: int = 0,
         resume: Snapshot | None = None) -> RunResult:
    steps = plan_.steps
    ntbs = len(steps)
    nsteps = [len(tb) for tb in steps]
    total = [n * ntiles for n in nsteps]
    widths = _layout(plan_).widths
    params = (slice_mb, fifo_slots, local_alpha_us, local_beta_us_per_mb, reduce_beta_us_per_mb)
    stop = stop_at * (1 + STOP_MARGIN)
    stopping = math.isfinite(stop)
    if resume is not None and (resume.plan_id != id(plan_) or resume.params != params or resume.ntiles >= ntiles
                               or (stopping or keep_for) and (resume.keep_for, resume.stop_at) !=
                               (keep_for or ntiles, stop_at)):
        raise ValueError("a run goes on only from a probe for it: the same plan, parameters, tiles and stop")
    if resume is not None and stopping and not keep_for and resume.proved is not None:
        raise NotFaster(f"the makespan is at least {resume.proved} us")  # before the probe parted from this run
    # the loop's state (what each part is: collsynth.sim.snapshot.fresh)
    dep_waiters: list[dict[int, list[int]]]
    due: dict[float, list[int]]
    (pc, free, done, dep_waiters, arrivals, conn_waiter, consumed, slot_waiter, link_free, lanes, tile_end, times,
     due, to_go) = (fresh(total, ntiles, widths, plan_.num_links, plan_.switch_lanes) if resume is None
                    else restore(resume, ntiles, nsteps, widths))
    work = _work(plan_, slice_mb, fifo_slots, done, dep_waiters, arrivals, consumed, local_alpha_us=local_alpha_us,
                 local_beta_us_per_mb=local_beta_us_per_mb, reduce_beta_us_per_mb=reduce_beta_us_per_mb)
    if stopping and resume is None:
        for tb_work in work:
            for item in tb_work:
                if item[8] >= 0:  # a send: its link, its transfer time (over the tiles whose bound this is)
                    to_go[item[13]] += item[14] * (keep_for or ntiles)
    proved: float | None = None if resume is None else resume.proved
    if proved is not None:
        stopping = False
    kept: Snapshot | None = None
    tbs = [(work[g], nsteps[g], total[g], done[g], dep_waiters[g]) for g in range(ntbs)]
    queued: list[int] | None
    push = heapq.heappush
    pop = heapq.heappop
    replace = heapq.heapreplace

    # Where a threadblock would be queued at a time strictly before every queued time, it would be the next to
    # run: it goes on instead (the same order of events, without queueing it).
    while times:
        t = times[0]
        bucket = due[t]
        g = bucket.pop(0)
        if not bucket:
            pop(times)
            del due[t]
        tb_work, n, end, done_g, waiters = tbs[g]
        p = pc[g]
        f = free[g]
        tile, s = divmod(p, n)
        while p != end:
            (dep_done, dep_waiting, dep_n, dep_step, rc, sent, sent_n, sent_at, sc, freed, freed_n, freed_tile,
             freed_at, link, dur, switches, mirrors) = tb_work[s]
            ready = f
            if dep_done is not None:
                di = tile * dep_n + dep_step
                d = dep_done[di]
                if d < 0.0:
                    dep_waiting.setdefault(di, []).append(g)
                    break
                if d > ready:
                    ready = d
            if rc >= 0:  # the arrival of the matching send (-1: not sent yet)
                d = sent[tile * sent_n + sent_at]
                if d < 0.0:
                    conn_waiter[rc] = g
                    break
                if d > ready:
                    ready = d
            if freed is not None and tile >= freed_tile:  # the finish of the receive that frees this send's slot
                d = freed[(tile - freed_tile) * freed_n + freed_at]
                if d < 0.0:
                    slot_waiter[sc] = g
                    break
                if d > ready:
                    ready = d
            if ready > t:
                if times and ready >= times[0]:
                    queued = due.get(ready)
                    if queued is None:
                        due[ready] = [g]
                        push(times, ready)
                    else:
                        queued.append(g)
                    break
                t = ready
            if sc >= 0:
                start = link_free[link]
                if t > start:
                    start = t
                if switches:
                    for sw in switches:
                        if lanes[sw][0] > start:
                            start = lanes[sw][0]
                finish = start + dur
                link_free[link] = finish
                if stopping:
                    to_go[link] -= dur
                    if finish + to_go[link] >= stop:
                        if not keep_for:
                            raise NotFaster(f"the makespan is at least {finish + to_go[link]} us")
                        proved, stopping = finish + to_go[link], False  # the longer run stops here
                if switches:
                    for sw in switches:
                        replace(lanes[sw], finish)
                w = conn_waiter[sc]
                if w >= 0:
                    conn_waiter[sc] = -1
                    queued = due.get(finish)
                    if queued is None:
                        due[finish] = [w]
                        push(times, finish)
                    else:
                        queued.append(w)
            else:
                finish = t + dur  # a standalone local step's time; 0.0 for the others
            if rc >= 0:  # the receiving step is done with its slot
                w = slot_waiter[rc]
                if w >= 0:
                    slot_waiter[rc] = -1
                    queued = due.get(finish)
                    if queued is None:
                        due[finish] = [w]
                        push(times, finish)
                    else:
                        queued.append(w)
            done_g[p] = finish
            if mirrors is not None:  # a connection that _layout does not match (see there)
                for mirror, width, at in mirrors:
                    mirror[tile * width + at] = finish
            if waiters:
                waiting = waiters.pop(p, None)
                if waiting:
                    queued = due.get(finish)
                    if queued is None:
                        due[finish] = waiting
                        push(times, finish)
                    else:
                        queued += waiting
            f = finish
            p += 1
            s += 1
            if s == n:
                if finish > tile_end[tile]:
                    tile_end[tile] = finish
                s = 0
                tile += 1
            if finish > t:
                if times and finish >= times[0]:
                    queued = due.get(finish)
                    if queued is None:
                        due[finish] = [g]
                        push(times, finish)
                    else:
                        queued.append(g)
                    break
                t = finish
        else:  # g ran all of its tiles without queueing itself: the longer run's g goes on at t instead
            if keep_for and kept is None:
                pc[g], free[g] = p, f
                kept = take(Snapshot(id(plan_), params, ntiles, keep_for, stop_at, g, t,
                                     (pc, free, done, dep_waiters, arrivals, conn_waiter, consumed, slot_waiter,
                                      link_free, lanes, tile_end, times, due, to_go), proved))
                stopping = False  # this run's transfers from here on are not the longer run's
        pc[g] = p
        free[g] = f

    stuck = [g for g in range(ntbs) if pc[g] < total[g]]
    if stuck:
        waits = Waits(frozenset(i for i, w in enumerate(conn_waiter) if w >= 0),
                       frozenset(i for i, w in enumerate(slot_waiter) if w >= 0))
        raise SimError(f"the IR deadlocks: {describe_stuck(plan_, stuck, pc, nsteps, waits)}; check the order of "
                       "sends and receives on each connection and the step dependencies")
    return RunResult(time_us=max(free, default=0.0), tile_end_us=tuple(tile_end),
                     step_end_us=tuple(done), snapshot=kept)


class _Layout(NamedTuple):
    """Per connection: its sending and receiving threadblock (-1: none), the positions in a tile of that one's
    sends and this one's receives, and the width of its mirror lists (0: none; see `_layout`)."""

    senders: list[int]
    receivers: list[int]
    sends: list[list[int]]
    receives: list[list[int]]
    widths: list[int]


def _layout(plan_: Plan) -> _Layout:
    """Where the loop reads a connection's arrivals and freed slots (made once per plan).

    A connection has one sending and one receiving threadblock, which run their steps in order, so its k-th
    send is the sender's send number k % s of tile k // s (s: its sends per tile), and likewise for receives.
    Where a tile has as many receives as sends on the connection (`plan` makes every connection so: it checks
    that the IR's counts match), the k-th receive of tile t takes the k-th send of the same tile: the loop
    reads the arrival straight from the sender's finish times, and the freed slot from the receiver's. Other
    plans (the engine's tests build them) get a mirror list per connection, `width` entries a tile, that the
    steps write their finish times into as they run: the arrivals indexed by send, the receives' finishes by
    receive."""
    cached: _Layout | None = plan_.__dict__.get("_layout")
    if cached is None:
        nconn = len(plan_.connections)
        cached = _Layout([-1] * nconn, [-1] * nconn, [[] for _ in range(nconn)], [[] for _ in range(nconn)], [])
        for g, tb in enumerate(plan_.steps):
            for i, st in enumerate(tb):
                if st.send_conn >= 0:
                    cached.senders[st.send_conn] = g
                    cached.sends[st.send_conn].append(i)
                if st.recv_conn >= 0:
                    cached.receivers[st.recv_conn] = g
                    cached.receives[st.recv_conn].append(i)
        cached.widths.extend(0 if len(s) == len(r) else max(len(s), len(r))
                             for s, r in zip(cached.sends, cached.receives, strict=True))
        object.__setattr__(plan_, "_layout", cached)
    return cached


_WorkItem = tuple[list[float] | None, dict[int, list[int]], int, int, int, list[float], int, int, int,
                  list[float] | None, int, int, int, int, float, tuple[int, ...],
                  tuple[tuple[list[float], int, int], ...] | None]


_NO_WAITERS: dict[int, list[int]] = {}  # a step without a dependency (never read: its dependency is None)
_NO_TIMES: list[float] = []  # a step without a receive (never read)


def _work(plan_: Plan, slice_mb: float, fifo_slots: int | None, done: list[list[float]],
          dep_waiters: list[dict[int, list[int]]], arrivals: list[list[float]], consumed: list[list[float]], *,
          local_alpha_us: float, local_beta_us_per_mb: float,
          reduce_beta_us_per_mb: float | None) -> list[list[_WorkItem]]:
    """Per step, what the event loop reads: its dependency's finish times and waiters (None: no dependency),
    that threadblock's steps and the dependency's position; its receive connection and where the matching send's
    arrival is (a list, its entries per tile, the position in the tile); its send connection and where the finish
    of the receive that frees its FIFO slot is (None: unbounded FIFOs; a list, its entries per tile, how many
    tiles back, the position in the tile); its link, its duration (its transfer's, a standalone local step's,
    else 0), its switches, and the mirror lists it writes its finish time into (None: none)."""
    reduce_beta = local_beta_us_per_mb if reduce_beta_us_per_mb is None else reduce_beta_us_per_mb
    layout = _layout(plan_)
    nsteps = [len(tb) for tb in plan_.steps]
    work = []
    for tb in plan_.steps:
        items = []
        r_at = s_at = 0
        for st in tb:
            dg, rc, sc = st.dep_tb, st.recv_conn, st.send_conn
            if sc >= 0:
                dur = st.alpha_us + st.cnt * slice_mb * st.beta_us_per_mb
            elif st.local:
                dur = local_alpha_us + st.cnt * slice_mb * (reduce_beta if st.reduces else local_beta_us_per_mb)
            else:
                dur = 0.0
            mirrors = []
            sent, sent_n, sent_at = _NO_TIMES, 0, 0
            if rc >= 0 and layout.widths[rc]:
                sent, sent_n, sent_at = arrivals[rc], len(layout.receives[rc]), r_at
                if fifo_slots is not None:
                    mirrors.append((consumed[rc], sent_n, r_at))
            elif rc >= 0:
                sender = layout.senders[rc]
                sent, sent_n, sent_at = done[sender], nsteps[sender], layout.sends[rc][r_at]
            freed: list[float] | None = None
            freed_n = freed_tile = freed_at = 0
            if sc >= 0:
                per_tile = len(layout.sends[sc])
                if layout.widths[sc]:
                    mirrors.append((arrivals[sc], per_tile, s_at))
                if fifo_slots is not None:  # the send number k takes the slot that the receive number k - slots frees
                    back, at = divmod(s_at - fifo_slots, per_tile)
                    freed_tile = -back
                    if layout.widths[sc]:
                        freed, freed_n, freed_at = consumed[sc], per_tile, at
                    else:
                        receiver = layout.receivers[sc]
                        freed, freed_n, freed_at = done[receiver], nsteps[receiver], layout.receives[sc][at]
            items.append((done[dg] if dg >= 0 else None, dep_waiters[dg] if dg >= 0 else _NO_WAITERS,
                          nsteps[dg] if dg >= 0 else 0, st.dep_step, rc, sent, sent_n, sent_at, sc, freed, freed_n,
                          freed_tile, freed_at, st.link, dur, st.switches, tuple(mirrors) or None))
            r_at += rc >= 0
            s_at += sc >= 0
        work.append(items)
    return work
