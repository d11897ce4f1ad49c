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

Everything here is size-independent planning (`plan`) plus one event loop (`run`) driven by a queue of due times.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import NamedTuple

from collsynth.core.collector import paused_collector
from collsynth.core.steps import LOCAL_TYPES
from collsynth.ir import RECEIVING_TYPES, REDUCE, SENDING_TYPES, STEP_TYPES, Algo
from collsynth.sim import protocol
from collsynth.sim.nccl import SimError
from collsynth.sim.snapshot import Snapshot, fresh, restore, take
from collsynth.sim.stuck import Waits, describe_stuck
from collsynth.topologies.model import Topology

# MSCCL/NCCL's per-connection FIFO depth (NCCL_STEPS): sends in flight before the receiver must catch up.
FIFO_SLOTS = 8


class PlannedStep(NamedTuple):
    """One IR step with every lookup resolved to an index (size-independent). A NamedTuple: the event loop
    reads its fields once per step and tile, and a large IR has millions of them."""

    cnt: int
    dep_tb: int = -1  # global threadblock index of the dependency, -1 for none
    dep_step: int = -1  # position of the dependency step in that threadblock
    recv_conn: int = -1  # connection this step receives from, -1 for none
    send_conn: int = -1  # connection this step sends on, -1 for none
    link: int = -1  # link the send uses
    switches: tuple[int, ...] = ()  # switches whose budget the send shares
    alpha_us: float = 0.0  # alpha of the send's link
    beta_us_per_mb: float = 0.0  # effective beta of the send (link, or a slower switch)
    local: bool = False  # a standalone cpy / re
    reduces: bool = False  # a standalone re (its beta is the reduction's)


@dataclass(frozen=True)
class Plan:
    """The IR flattened for the event loop: global threadblocks 0..T-1 and their steps."""

    labels: tuple[tuple[int, int], ...]  # global tb index -> (rank, tb id)
    steps: tuple[tuple[PlannedStep, ...], ...]
    step_labels: tuple[tuple[int, ...], ...]  # the IR's `s` of each planned step (for messages)
    connections: tuple[tuple[int, int, int], ...]  # connection index -> (sender, receiver, channel)
    num_links: int
    switch_lanes: tuple[int, ...]  # lanes (bandwidth) per switch

    def __hash__(self) -> int:
        """The fields' hash, computed once: the tuner keys its simulations by plan (a hash walks every step).
        The fields hold only numbers, so the hash is the same in every process."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.labels, self.steps, self.step_labels, self.connections, self.num_links,
                           self.switch_lanes))
            object.__setattr__(self, "_hash", cached)
        return cached


@dataclass(frozen=True)
class RunResult:
    """One simulated run: the makespan, when each tile's last step finished and, per threadblock, when each of
    its (tile, step) finished (index `tile * steps + step`; the steady-state search in `simulate` reads it)."""

    time_us: float
    tile_end_us: tuple[float, ...]
    step_end_us: tuple[list[float], ...] = ()  # the event loop's own lists (not copied): read, don't change
    snapshot: Snapshot | None = None  # run(keep_for=N): the state the run of N tiles goes on from


def plan(ir: Algo, topology: Topology) -> Plan:
    """Resolve peers to links, dependencies to indices, and check the IR can run (size-independent)."""
    protocol.check_protocol(ir.proto, f"IR {ir.name!r}")
    if ir.ngpus != topology.num_ranks:
        raise SimError(f"IR {ir.name!r} is for {ir.ngpus} GPUs but topology {topology.name!r} has "
                       f"{topology.num_ranks} ranks; pick a topology of the same size")
    labels: list[tuple[int, int]] = []
    index: dict[tuple[int, int], int] = {}
    positions: dict[tuple[int, int], dict[int, int]] = {}  # (rank, tb id) -> step `s` -> position
    for gpu in ir.gpus:
        if not 0 <= gpu.id < topology.num_ranks:
            raise SimError(f"IR {ir.name!r}: gpu id {gpu.id} is outside 0..{topology.num_ranks - 1}")
        for tb in gpu.tbs:
            if (gpu.id, tb.id) in index:
                raise SimError(f"IR {ir.name!r}: gpu {gpu.id} has two threadblocks with id {tb.id}")
            index[(gpu.id, tb.id)] = len(labels)
            labels.append((gpu.id, tb.id))
            positions[(gpu.id, tb.id)] = {step.s: i for i, step in enumerate(tb.steps)}

    link_ids = {(link.src, link.dst): i for i, link in enumerate(topology.link_list)}
    switches_of: dict[tuple[int, int], list[int]] = {}
    for i, switch in enumerate(topology.switches):
        for pair in switch.links:
            switches_of.setdefault(pair, []).append(i)

    connections: dict[tuple[int, int, int], int] = {}
    send_owner: dict[int, tuple[int, int]] = {}
    recv_owner: dict[int, tuple[int, int]] = {}
    sends: list[int] = []  # per connection: sending steps on it
    receives: list[int] = []

    def connection(key: tuple[int, int, int]) -> int:
        if key not in connections:
            connections[key] = len(connections)
            sends.append(0)
            receives.append(0)
        return connections[key]

    new_step = tuple.__new__
    all_steps: list[tuple[PlannedStep, ...]] = []
    all_step_labels: list[tuple[int, ...]] = []
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            where = f"IR {ir.name!r} gpu {gpu.id} tb {tb.id}"
            position = positions[(gpu.id, tb.id)]
            send_conn = recv_conn = -1
            if any(step.type in SENDING_TYPES for step in tb.steps):
                if not 0 <= tb.send < topology.num_ranks:
                    raise SimError(f"{where}: has sending steps but send peer {tb.send}; set the tb's send peer")
                send_conn = connection((gpu.id, tb.send, tb.chan))
                if send_conn in send_owner:
                    other = send_owner[send_conn]
                    raise SimError(f"{where}: shares the send connection {gpu.id}->{tb.send} channel {tb.chan} "
                                   f"with tb {other[1]}; give each threadblock its own (peer, channel)")
                send_owner[send_conn] = (gpu.id, tb.id)
            if any(step.type in RECEIVING_TYPES for step in tb.steps):
                if not 0 <= tb.recv < topology.num_ranks:
                    raise SimError(f"{where}: has receiving steps but recv peer {tb.recv}; set the tb's recv peer")
                recv_conn = connection((tb.recv, gpu.id, tb.chan))
                if recv_conn in recv_owner:
                    other = recv_owner[recv_conn]
                    raise SimError(f"{where}: shares the receive connection {tb.recv}->{gpu.id} channel "
                                   f"{tb.chan} with tb {other[1]}; give each threadblock its own (peer, channel)")
                recv_owner[recv_conn] = (gpu.id, tb.id)
            link, alpha, beta = -1, 0.0, 0.0
            switch_ids: tuple[int, ...] = ()
            if send_conn >= 0:
                pair = (gpu.id, tb.send)
                if pair not in link_ids:
                    raise SimError(f"{where}: sends {gpu.id}->{tb.send} but topology {topology.name!r} has no link "
                                   "between them; route through a neighbour or use a topology with that link")
                link = link_ids[pair]
                topo_link = topology.link_list[link]
                switch_ids = tuple(switches_of.get(pair, ()))
                alpha = topo_link.alpha_us
                beta = max([topo_link.beta_us_per_mb] + [topology.switches[i].beta_us_per_mb for i in switch_ids])
                if ir.proto != "Simple":  # Simple is the topology's own alpha-beta, bit for bit
                    alpha *= protocol.latency_scale(ir.proto, topo_link.kind)
                    beta *= protocol.beta_scale(ir.proto)
            planned = []
            for step in tb.steps:
                if step.type not in STEP_TYPES:
                    raise SimError(f"{where} step {step.s}: unknown step type {step.type!r}; "
                                   f"known: {' '.join(STEP_TYPES)}")
                if step.cnt < 0:
                    raise SimError(f"{where} step {step.s}: negative count {step.cnt}")
                dep_tb = dep_step = -1
                if step.depid >= 0:
                    if (gpu.id, step.depid) not in index:
                        raise SimError(f"{where} step {step.s}: depends on tb {step.depid}, which gpu {gpu.id} "
                                       "does not have")
                    dep_tb = index[(gpu.id, step.depid)]
                    dep_positions = positions[(gpu.id, step.depid)]
                    if step.deps not in dep_positions:
                        raise SimError(f"{where} step {step.s}: depends on step {step.deps} of tb {step.depid}, "
                                       "which does not exist")
                    dep_step = dep_positions[step.deps]
                    if dep_tb == index[(gpu.id, tb.id)] and dep_step >= position[step.s]:
                        raise SimError(f"{where} step {step.s}: depends on a later step of its own threadblock")
                sending = step.type in SENDING_TYPES
                receiving = step.type in RECEIVING_TYPES
                if sending:
                    sends[send_conn] += 1
                if receiving:
                    receives[recv_conn] += 1
                # tuple.__new__: PlannedStep's own __new__ is Python code, and a large IR has many steps
                if sending:
                    planned.append(new_step(PlannedStep, (step.cnt, dep_tb, dep_step, recv_conn if receiving else -1,
                                                          send_conn, link, switch_ids, alpha, beta, False, False)))
                else:
                    planned.append(new_step(PlannedStep, (step.cnt, dep_tb, dep_step, recv_conn if receiving else -1,
                                                          -1, -1, (), 0.0, 0.0, step.type in LOCAL_TYPES,
                                                          step.type == REDUCE)))
            all_steps.append(tuple(planned))
            all_step_labels.append(tuple(step.s for step in tb.steps))
    conn_list = sorted(connections, key=connections.__getitem__)
    for key, conn in connections.items():
        if sends[conn] != receives[conn]:
            raise SimError(f"IR {ir.name!r}: connection {key[0]}->{key[1]} channel {key[2]} carries {sends[conn]} "
                           f"sends but {receives[conn]} receives; every send needs exactly one matching receive")
    return Plan(labels=tuple(labels), steps=tuple(all_steps), step_labels=tuple(all_step_labels),
                connections=tuple(conn_list), num_links=len(topology.link_list),
                switch_lanes=tuple(max(1, switch.bandwidth) for switch in topology.switches))


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
    nconn = len(plan_.connections)
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
     due, to_go) = (fresh(total, ntiles, nconn, plan_.num_links, plan_.switch_lanes) if resume is None
                    else restore(resume, ntiles, nsteps))
    work = _work(plan_, slice_mb, done, dep_waiters, local_alpha_us=local_alpha_us,
                 local_beta_us_per_mb=local_beta_us_per_mb, reduce_beta_us_per_mb=reduce_beta_us_per_mb)
    if stopping and resume is None:
        for tb_work in work:
            for item in tb_work:
                if item[6] >= 0:  # a send: its link, its transfer time (over the tiles whose bound this is)
                    to_go[item[8]] += item[9] * (keep_for or ntiles)
    proved: float | None = None if resume is None else resume.proved
    if proved is not None:
        stopping = False
    slots = fifo_slots if fifo_slots is not None else -1
    bounded = slots >= 0
    kept: Snapshot | None = None
    # a connection has one sending and one receiving threadblock, which run their steps in order: the k-th
    # receive (send) on it is tile * (receives per tile) + the step's rank among its threadblock's receives
    tbs = [(work[g], nsteps[g], total[g], done[g], dep_waiters[g], sum(1 for st in steps[g] if st.recv_conn >= 0),
            sum(1 for st in steps[g] if st.send_conn >= 0)) for g in range(ntbs)]
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
        tb_work, n, end, done_g, waiters, per_tile_r, per_tile_s = tbs[g]
        p = pc[g]
        f = free[g]
        tile, s = divmod(p, n)
        while p != end:
            dep_done, dep_waiting, dep_n, dep_step, rc, r_at, sc, s_at, link, dur, switches = tb_work[s]
            ready = f
            if dep_done is not None:
                di = tile * dep_n + dep_step
                d = dep_done[di]
                if d < 0.0:
                    dep_waiting.setdefault(di, []).append(g)
                    break
                if d > ready:
                    ready = d
            if rc >= 0:
                arrived = arrivals[rc]
                k = tile * per_tile_r + r_at
                if k >= len(arrived):
                    conn_waiter[rc] = g
                    break
                if arrived[k] > ready:
                    ready = arrived[k]
            if sc >= 0 and bounded:
                j = tile * per_tile_s + s_at - slots  # this send takes the slot that receive j frees
                if j >= 0:
                    freed = consumed[sc]
                    if j >= len(freed):
                        slot_waiter[sc] = g
                        break
                    if freed[j] > ready:
                        ready = freed[j]
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
                arrivals[sc].append(finish)
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
            if rc >= 0 and bounded:
                consumed[rc].append(finish)  # the receiving step is done with its slot
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


_WorkItem = tuple[list[float] | None, dict[int, list[int]], int, int, int, int, int, int, int, float,
                  tuple[int, ...]]


_NO_WAITERS: dict[int, list[int]] = {}  # a step without a dependency (never read: its dependency is None)


def _work(plan_: Plan, slice_mb: float, done: list[list[float]], dep_waiters: list[dict[int, list[int]]], *,
          local_alpha_us: float, local_beta_us_per_mb: float,
          reduce_beta_us_per_mb: float | None) -> list[list[_WorkItem]]:
    """Per step, what the event loop reads: its dependency's finish times and waiters (None: no dependency),
    that threadblock's steps and the dependency's position; its receive connection and its rank among its
    threadblock's receives; its send connection and its rank among the sends; its link, its duration (its
    transfer's, a standalone local step's, else 0) and its switches."""
    reduce_beta = local_beta_us_per_mb if reduce_beta_us_per_mb is None else reduce_beta_us_per_mb
    nsteps = [len(tb) for tb in plan_.steps]
    work = []
    for tb in plan_.steps:
        items = []
        r_at = s_at = 0
        for st in tb:
            dg = st.dep_tb
            if st.send_conn >= 0:
                dur = st.alpha_us + st.cnt * slice_mb * st.beta_us_per_mb
            elif st.local:
                dur = local_alpha_us + st.cnt * slice_mb * (reduce_beta if st.reduces else local_beta_us_per_mb)
            else:
                dur = 0.0
            items.append((done[dg] if dg >= 0 else None, dep_waiters[dg] if dg >= 0 else _NO_WAITERS,
                          nsteps[dg] if dg >= 0 else 0, st.dep_step, st.recv_conn, r_at, st.send_conn, s_at,
                          st.link, dur, st.switches))
            r_at += st.recv_conn >= 0
            s_at += st.send_conn >= 0
        work.append(items)
    return work
