"""The event loop's state where a run of P tiles and a run of N > P tiles part, from which the N-run goes on.

The steady-state search (`collsynth.sim.simulate.time_tiles`) runs 16 tiles, then maybe 32, then all N of them.
The loop (`collsynth.sim.engine._run`) reads the number of tiles only where a threadblock reaches the end of its
tiles: `end` (the length of its `done` list) and the stop bound's transfer time still to go. So the two runs make
the same events in the same order until the P-run's first threadblock `g` leaves its `while p != end` loop
without having queued itself (the loop's `else`): there the N-run's `g`, at the same time `t`, goes on with its
step (P, 0) instead. The probe keeps a copy of its state at that moment (`take`), with the N-run's transfer time
still to go (it tracks the N-run's stop bound but is never stopped itself), and the N-run starts from it.

Why `g` goes first in the queue at `t` (`restore`): in the N-run, `g` runs its next step at once, at time `t`,
before the loop pops anything. The loop's invariant is t <= times[0]: `t` is the time just popped (still
times[0] while its bucket has threadblocks left, else earlier than every queued time), or a time the loop moved
on to only because it was strictly earlier than every queued time. So putting `g` first in the bucket of `t`
(made if there is none, then the earliest) makes the next pop `g` at `t`; once popped, the queue is the N-run's
again (the bucket is dropped exactly when it is empty, as it is in the N-run). Putting `g` last there would
let the threadblocks already due at `t` run first: tests/sim/test_sim_resume.py has a plan where that changes
which send a link carries first.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Any

# the loop's state, in this order: pc, free, done, dep_waiters, arrivals, conn_waiter, consumed, slot_waiter,
# link_free, lanes, tile_end, times, due, to_go (what each one is: `fresh`)
State = tuple[Any, ...]


@dataclass(frozen=True)
class Snapshot:
    """A copy of a probe's state where it parted from the run of `keep_for` tiles, and how it was made: a run
    goes on from it only with the same plan (by identity) and parameters."""

    plan_id: int
    params: tuple[Any, ...]  # slice_mb, fifo_slots, local alpha, local beta, reduce beta
    ntiles: int  # the probe's tiles
    keep_for: int  # the tiles of the run whose stop bound `to_go` and `proved` are
    stop_at: float
    g: int  # the threadblock that went on in the longer run, at time t
    t: float
    state: State
    proved: float | None  # the bound that stopped the longer run before this point (None: not stopped)


def fresh(total: list[int], ntiles: int, widths: list[int], num_links: int, switch_lanes: tuple[int, ...]) -> State:
    """The loop's state at the start. pc: per threadblock, the next (tile * steps + step) to run; free: when its
    previous step finished; done: the finish time of each of its (tile, step), -1 while unknown; dep_waiters: per
    threadblock, its step -> the threadblocks waiting for it; arrivals (consumed): per connection, the arrival
    times of its sends (finish times of its receives) by number, -1 while unknown, `widths` a tile (0: the loop
    reads them from `done`, collsynth.sim.engine._layout); conn_waiter (slot_waiter): the receiver waiting for a
    message (the sender waiting for a free slot) on the connection, -1 for none; link_free: when each link is
    next free; lanes: per switch, a min-heap of lane free times; tile_end: when each tile's last step finished.
    The event queue: the distinct times at which threadblocks are due (`times`, a heap of floats) and, per time,
    the threadblocks due then in the order they were queued (`due`): the order of a heap of (time, sequence
    number, threadblock), without comparing tuples. to_go: per link, the transfer time of its sends not yet
    started (the stop bound's)."""
    ntbs = len(total)
    first = [g for g in range(ntbs) if total[g]]
    return ([0] * ntbs, [0.0] * ntbs, [[-1.0] * t for t in total], [{} for _ in range(ntbs)],
            [[-1.0] * (w * ntiles) for w in widths], [-1] * len(widths), [[-1.0] * (w * ntiles) for w in widths],
            [-1] * len(widths), [0.0] * num_links,
            [[0.0] * b for b in switch_lanes], [0.0] * ntiles, [0.0] if first else [], {0.0: first},
            [0.0] * num_links)


def _copy(state: State) -> State:
    (pc, free, done, dep_waiters, arrivals, conn_waiter, consumed, slot_waiter, link_free, lanes, tile_end, times,
     due, to_go) = state
    return (list(pc), list(free), [list(d) for d in done], [{k: list(v) for k, v in w.items()} for w in dep_waiters],
            [list(a) for a in arrivals], list(conn_waiter), [list(c) for c in consumed], list(slot_waiter),
            list(link_free), [list(lane) for lane in lanes], list(tile_end), list(times),
            {k: list(v) for k, v in due.items()}, list(to_go))


def take(snap: Snapshot) -> Snapshot:
    """`snap` with a copy of its state (the probe goes on changing its own)."""
    return Snapshot(snap.plan_id, snap.params, snap.ntiles, snap.keep_for, snap.stop_at, snap.g, snap.t,
                    _copy(snap.state), snap.proved)


def restore(snap: Snapshot, ntiles: int, nsteps: list[int], widths: list[int]) -> State:
    """The state a run of `ntiles` (> snap.ntiles) tiles goes on from: a copy, its per-tile lists grown, and
    threadblock `g` first in the queue at `t` (see the module's docstring)."""
    (pc, free, done, dep_waiters, arrivals, conn_waiter, consumed, slot_waiter, link_free, lanes, tile_end, times,
     due, to_go) = _copy(snap.state)
    grow = ntiles - snap.ntiles
    done = [d + [-1.0] * (n * grow) for d, n in zip(done, nsteps, strict=True)]
    arrivals = [a + [-1.0] * (w * grow) for a, w in zip(arrivals, widths, strict=True)]
    consumed = [c + [-1.0] * (w * grow) for c, w in zip(consumed, widths, strict=True)]
    if snap.t in due:
        due[snap.t].insert(0, snap.g)
    else:
        due[snap.t] = [snap.g]
        heapq.heappush(times, snap.t)
    return (pc, free, done, dep_waiters, arrivals, conn_waiter, consumed, slot_waiter, link_free, lanes,
            tile_end + [0.0] * grow, times, due, to_go)
