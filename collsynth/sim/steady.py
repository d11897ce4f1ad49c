"""The periodic steady state of the tile loop: how `simulate` times many tiles without simulating each one.

Every tile runs the same program and the event loop (`collsynth.sim.engine`) is deterministic and unchanged by
a shift of time, so once the state of the (infinite) tile loop repeats -- every step of tile k finishes exactly
D after the same step of tile k - q, over a window of tiles longer than any interaction between tiles reaches
(how far threadblocks run ahead of each other, plus the FIFO's depth) -- it repeats for ever after.

A run of P tiles is the infinite loop until its first sending threadblock runs out of tiles; after that the
others meet less contention (the end effect). So the period is looked for only among the tiles that finished
before then ("clean" tiles). Runs of N and of P tiles with N = P (mod q) then differ only by (N - P) / q more
periods before the same ending, shifted by D each: T(N) = T(P) + (N - P) / q * D exactly, the closed form of
simulating all N tiles.

Parts of the program coupled only one way (by a dependency; no connection, link or switch in common) may run
at their own rates: a part waiting on a faster one is fine if the wait never delayed it (its slack only
grows); one faster than what it waits on is not steady yet. Where no period shows (threadblocks drifting
apart, unbounded FIFOs), the caller simulates more tiles, up to all of them.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.sim.engine import Plan, RunResult

MAX_PERIOD_TILES = 16  # longest period (in tiles) looked for
RELATIVE_TOLERANCE = 1e-9  # of the run's times: what counts as "the same shift" under float rounding


@dataclass(frozen=True)
class Period:
    """The steady state of one part of the program: every step's finish time grows by `time_us` every `tiles`
    tiles."""

    tiles: int
    time_us: float


@dataclass(frozen=True)
class SteadyState:
    """The periods of the program's independent parts (threadblocks that share no connection, dependency,
    link or switch run at their own rates) and the threadblocks of each part."""

    parts: tuple[tuple[int, ...], ...]
    periods: tuple[Period, ...]

    @property
    def tiles(self) -> int:
        """A whole number of every part's periods."""
        return math.lcm(*(p.tiles for p in self.periods))

    def extrapolate(self, result: RunResult, probe: int, ntiles: int) -> float:
        """The makespan of `ntiles` tiles from a run of `probe` tiles with ntiles = probe (mod self.tiles)."""
        ends = [max((ends[-1] for ends in (result.step_end_us[g] for g in part) if ends), default=0.0)
                + (ntiles - probe) // period.tiles * period.time_us
                for part, period in zip(self.parts, self.periods, strict=True)]
        return max(ends, default=0.0)


def find_steady_state(plan_: Plan, result: RunResult, ntiles: int, fifo_slots: int | None) -> SteadyState | None:
    """Every part's period in a run of `ntiles` tiles, or None when one part shows none yet (or the parts'
    dependencies do not allow adding periods independently)."""
    if fifo_slots is None:  # unbounded FIFOs: a sender may run ahead without bound, no state repeats
        return None
    if plan_ not in _COUPLING:  # the probes of one plan (16 tiles, 32, ...) share it
        parts = coupled_parts(plan_)
        _COUPLING[plan_] = parts, _cross_dependencies(plan_, {g: i for i, part in enumerate(parts) for g in part})
    parts, waits_on = _COUPLING[plan_]
    # tile x step finish times of each threadblock with steps (read by every part's search)
    ends = {g: np.asarray(result.step_end_us[g], dtype=float).reshape(ntiles, len(plan_.steps[g]))
            for part in parts for g in part}
    own_clean = [_clean_tiles(plan_, result, ends, part) for part in parts]
    periods = []
    for i, part in enumerate(parts):
        # a part's tiles are exact only as far as the tiles of the parts it waits on are
        clean = min([own_clean[i]] + [own_clean[j] for j in _reachable(i, waits_on)])
        period = find_period(ends, fifo_slots, part, clean)
        if period is None:
            return None
        periods.append(period)
    for waiter, (dependee, steps) in ((w, d) for w, deps in waits_on.items() for d in deps.items()):
        rate_w = periods[waiter].time_us / periods[waiter].tiles
        rate_d = periods[dependee].time_us / periods[dependee].tiles
        tolerance = RELATIVE_TOLERANCE * max(1.0, rate_d)
        if rate_w < rate_d - tolerance:  # the waiter would catch up with what it waits for: not steady yet
            return None
        if rate_w > rate_d + tolerance and not _never_waits(plan_, result, ntiles, steps):
            return None  # a slower waiter's wait shrinks as it falls behind: the run's ending is not the N-run's
    return SteadyState(tuple(parts), tuple(periods))


# plan -> (coupled_parts, _cross_dependencies): numbers only, so a plan no longer used is dropped from it
_COUPLING: weakref.WeakKeyDictionary[Plan, Any] = weakref.WeakKeyDictionary()


def coupled_parts(plan_: Plan) -> list[tuple[int, ...]]:
    """Threadblocks (with steps) grouped by what couples their timing both ways: a connection's two ends (its
    messages one way, its FIFO slots the other), a shared link or switch lane. (A dependency couples one way.)"""
    parent = list(range(len(plan_.steps)))

    def root(g: int) -> int:
        while parent[g] != g:
            parent[g] = parent[parent[g]]
            g = parent[g]
        return g

    first_of: dict[tuple[str, int], int] = {}
    for g, steps in enumerate(plan_.steps):
        for st in steps:
            for key in [("conn", st.send_conn), ("conn", st.recv_conn), ("link", st.link)] + [
                    ("switch", sw) for sw in st.switches]:
                if key[1] >= 0:
                    parent[root(g)] = root(first_of.setdefault(key, g))
    groups: dict[int, list[int]] = {}
    for g, steps in enumerate(plan_.steps):
        if steps:
            groups.setdefault(root(g), []).append(g)
    return [tuple(group) for group in groups.values()]


def _cross_dependencies(plan_: Plan, part_of: dict[int, int]) -> dict[int, dict[int, list[tuple[int, int]]]]:
    """waiter part -> dependee part -> the waiting (threadblock, step) pairs."""
    out: dict[int, dict[int, list[tuple[int, int]]]] = {}
    for g, steps in enumerate(plan_.steps):
        for s, st in enumerate(steps):
            if st.dep_tb >= 0 and part_of[st.dep_tb] != part_of[g]:
                out.setdefault(part_of[g], {}).setdefault(part_of[st.dep_tb], []).append((g, s))
    return out


def _reachable(start: int, waits_on: dict[int, dict[int, list[tuple[int, int]]]]) -> set[int]:
    seen: set[int] = set()
    todo = [start]
    while todo:
        for j in waits_on.get(todo.pop(), {}):
            if j not in seen:
                seen.add(j)
                todo.append(j)
    return seen


def _never_waits(plan_: Plan, result: RunResult, ntiles: int, steps: list[tuple[int, int]]) -> bool:
    """Whether each of these steps' dependency was done, in every tile, before the step's threadblock finished
    its previous step (so it never delayed the step)."""
    for g, s in steps:
        st = plan_.steps[g][s]
        n, dep_n = len(plan_.steps[g]), len(plan_.steps[st.dep_tb])
        own, dep = result.step_end_us[g], result.step_end_us[st.dep_tb]
        for tile in range(ntiles):
            before = own[tile * n + s - 1] if tile * n + s > 0 else 0.0
            if dep[tile * dep_n + st.dep_step] > before:
                return False
    return True


def _clean_tiles(plan_: Plan, result: RunResult, ends: dict[int, np.ndarray], part: tuple[int, ...]) -> int:
    """How many leading tiles of the part finished before its first sending threadblock ran out of tiles (until
    then the run is the infinite tile loop; afterwards the others meet less contention)."""
    sending = [g for g in part if any(st.send_conn >= 0 for st in plan_.steps[g])]
    if not sending:
        return len(ends[part[0]])
    run_out = min(result.step_end_us[g][-1] for g in sending)
    latest = np.max(np.column_stack([ends[g].max(axis=1) for g in part]), axis=1)
    late = np.flatnonzero(latest >= run_out)
    return int(late[0]) if late.size else len(latest)


def find_period(ends: dict[int, np.ndarray], fifo_slots: int, part: tuple[int, ...], clean: int) -> Period | None:
    """The period of one part's first `clean` tiles (`ends`: tile x step finish times per threadblock), or None
    when they show none (or too few)."""
    if clean < 2:
        return None
    blocks = [ends[g][:clean] for g in part]
    times = np.hstack(blocks)  # tile x every step of the part's threadblocks
    last_steps = np.column_stack([block[:, -1] for block in blocks])  # tile x threadblock: the tile's last step
    # how many tiles the fastest threadblock is ahead of the slowest: the fastest finished tile j before the
    # slowest finished tile k
    slowest, fastest = last_steps.max(axis=1), last_steps.min(axis=1)
    ahead = int((np.searchsorted(fastest, slowest, side="right") - 1 - np.arange(clean)).max())
    tolerance = RELATIVE_TOLERANCE * max(1.0, float(np.abs(times).max()))
    for q in range(1, MAX_PERIOD_TILES + 1):
        window = max(ahead, 0) + fifo_slots + 2 * q  # every tile the window's successors can interact with
        if window + q > clean:
            return None
        shift = times[clean - window:clean] - times[clean - window - q:clean - q]
        if float(shift.max() - shift.min()) <= tolerance:
            return Period(q, float(shift.mean()))
    return None
