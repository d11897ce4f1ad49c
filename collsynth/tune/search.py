"""The search: exhaustive over (algorithm, protocol), coordinate descent over the resource axes.

`tune_size` times, for every candidate and protocol, the grid's start (or a warm start: the best resource
values of the previous size) and walks from the better half of them along each resource axis in turn. A
candidate's later walks (its other protocols) start from its best resource values so far where that start is
no slower than their own: the resources that suit a schedule at one size (instances, merging, threadblocks)
mostly suit it under another protocol too, as they do at the next size, and the walk is then short. An
ordered axis (instances) is line-searched outwards from its current value, first upwards then downwards,
stopping at the first value that is no faster (time is unimodal along it); an unordered axis tries each of
its values. Passes repeat until one changes nothing. `exhaustive_size` times every configuration of the
same grid (the reference).

The descent only asks whether a configuration beats the time to beat, so a configuration is not simulated
when a bound that runs no simulation already says no (nor compiled, where the bound derived from another
instance count of it says no: Evaluator.bound_reaches), and its simulation stops as soon as it proves no (the
simulator's `stop_at`). Neither changes a decision, the path, the pick or its time. Every simulation, stopped
or not, is an evaluation; the trace holds those simulated to the end, and `stopped` counts the others.

A whole descent is skipped where no configuration of its algorithm and protocol can beat the best found so
far: its floor, the busiest link's transfer time, does not depend on the resources (Evaluator.floor). At 1GB
on DGX-1 that is every LL128 descent (LL128 carries 120 bytes of data in 128, Simple's best is faster). What
the descent would have found could not be picked; the only other effect is that a later descent of the same
candidate borrows from its other walks.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from collsynth.core.collector import paused_collector
from collsynth.tune.evaluate import Evaluator, Timing
from collsynth.tune.space import ORDERED_AXES, RESOURCE_AXES, Candidate, Config, Grid

MAX_PASSES = 3


@dataclass(frozen=True)
class SizeResult:
    """The tuned configuration of one size and how the search got there."""

    size: int  # requested size (bytes)
    best: Config | None  # None: no configuration could run
    timing: Timing
    evaluations: int  # distinct evaluations this size spent
    trace: tuple[tuple[Config, float], ...]  # every evaluation in order: (configuration, time in us)
    seconds: float
    stopped: int = 0  # of the evaluations, simulations stopped once they proved their configuration could not win

    def to_dict(self) -> dict:  # type: ignore[type-arg]
        return {"size": self.size, "nccl_size": self.timing.size_bytes,
                "best": self.best.to_dict() if self.best else None, "time_us": self.timing.time_us,
                "busbw_GBps": self.timing.busbw_GBps, "evaluations": self.evaluations, "stopped": self.stopped,
                "seconds": round(self.seconds, 4),
                "trace": [[c.label(), t if math.isfinite(t) else None] for c, t in self.trace]}


class _Walk:
    """Evaluations of one size, recorded in order."""

    def __init__(self, evaluator: Evaluator, size: int) -> None:
        self.evaluator, self.size = evaluator, size
        self.trace: list[tuple[Config, float]] = []
        self.spent = 0
        self.stopped = 0

    def time(self, config: Config) -> float:
        if not self.evaluator.seen(config, self.size):
            self.spent += 1
            timing = self.evaluator.time(config, self.size)
            self.trace.append((config, timing.time_us))
        return self.evaluator.time(config, self.size).time_us

    def time_below(self, config: Config, limit: float) -> float:
        """time(config) where it is below `limit`, else a value >= limit (Evaluator.time_below). A simulation
        stopped once it proved that is an evaluation, counted also in `stopped` and not traced (it has no time);
        the search's decisions, which only ask "faster than limit?", are unchanged."""
        if self.evaluator.seen(config, self.size):
            return self.evaluator.time(config, self.size).time_us
        t = self.evaluator.time_below(config, self.size, limit)
        self.spent += 1  # a stopped simulation still ran: it counts as an evaluation (the budget the issue limits)
        if self.evaluator.seen(config, self.size):
            self.trace.append((config, t))
        else:
            self.stopped += 1
        return t

    def bound(self, config: Config) -> float:
        """A lower bound on time(config) that runs no simulation (Evaluator.bound)."""
        return self.evaluator.bound(config, self.size)

    def floor(self, config: Config) -> float:
        """A lower bound on the time of every configuration of config's algorithm and protocol (Evaluator.floor)."""
        return self.evaluator.floor(config, self.size)

    def bound_reaches(self, config: Config, limit: float) -> bool:
        """bound(config) >= limit, where possible without compiling config (Evaluator.bound_reaches)."""
        return self.evaluator.bound_reaches(config, self.size, limit)


def descend(walk: _Walk, grid: Grid, candidate: Candidate, start: Config) -> tuple[Config, float]:
    """Coordinate descent over the resource axes from `start` (see the module docstring)."""
    best, best_t = start, walk.time(start)
    for _ in range(MAX_PASSES):
        moved = False
        for axes in RESOURCE_AXES:
            values = grid.joint_values(axes, candidate)
            if len(values) < 2:
                continue
            if axes in ORDERED_AXES:
                found, found_t = _line_search(walk, best, best_t, axes[0], [v[0] for v in values])
            else:
                found, found_t = best, best_t
                for value in values:
                    config = replace(best, **dict(zip(axes, value, strict=True)))
                    if walk.bound_reaches(config, found_t):
                        continue  # cannot be faster than what this axis found: the same path, one simulation less
                    t = walk.time_below(config, found_t)
                    if t < found_t:
                        found, found_t = config, t
            if found != best:
                best, best_t, moved = found, found_t, True
        if not moved:
            break
    return best, best_t


def _line_search(walk: _Walk, best: Config, best_t: float, axis: str,
                 values: Sequence[Any]) -> tuple[Config, float]:
    """Outwards from the current value along an ordered axis, up first, then down; stop at no gain."""
    at = values.index(getattr(best, axis)) if getattr(best, axis) in values else 0
    for direction in (1, -1):
        k = at + direction
        moved = False
        while 0 <= k < len(values):
            config = replace(best, **{axis: values[k]})
            if walk.bound_reaches(config, best_t):
                break  # not faster, as the simulation would have said
            t = walk.time_below(config, best_t)
            if not t < best_t:
                break
            best, best_t, moved = config, t, True
            k += direction
        if moved:
            break  # unimodal: once one direction gained, the other cannot
    return best, best_t


def tune_size(evaluator: Evaluator, size: int, grid: Grid | None = None,
              warm: Config | None = None, descents: int | None = None) -> SizeResult:
    """The best configuration at `size`: every (candidate, protocol) exhaustively, the resources by descent
    (from `warm`'s resource values when given, e.g. the previous size's best; a candidate's later descents from
    its best resources so far where they start no slower). `descents`: descend only from
    that many of the best (candidate, protocol) starting points (None: the better half, rounded up; AutoCCL
    likewise prunes implementations whose starting point is already far behind)."""
    # compiled IRs and plans pile up in the evaluator: nothing cyclic to free (and nothing to scan at the end)
    with paused_collector(promote=True):
        return _tune_size(evaluator, size, grid or Grid(), warm, descents)


def _tune_size(evaluator: Evaluator, size: int, grid: Grid, warm: Config | None, descents: int | None) -> SizeResult:
    start_clock = time.perf_counter()
    walk = _Walk(evaluator, size)
    starts = []
    for candidate in evaluator.candidates.values():
        for protocol in grid.protocols:
            start = grid.start(candidate, protocol)
            if warm is not None:
                start = _warm_start(start, warm, grid, candidate)
            starts.append((candidate, start))
    keep = descents if descents is not None else (len(starts) + 1) // 2
    if keep < len(starts):
        starts = _best_starts(walk, starts, keep)
    best: Config | None = None
    best_t = math.inf
    found: dict[str, tuple[Config, float]] = {}  # per candidate: the best of its walks so far
    for candidate, start in starts:
        if walk.floor(start) >= best_t:
            continue  # nothing this descent could reach is faster than the best found: the pick stays
        if candidate.name in found:
            start = _better_start(walk, start, _warm_start(start, found[candidate.name][0], grid, candidate))
        config, t = descend(walk, grid, candidate, start)
        if candidate.name not in found or t < found[candidate.name][1]:
            found[candidate.name] = config, t
        if t < best_t:
            best, best_t = config, t
    return _result(evaluator, size, best, walk, start_clock)


def _better_start(walk: _Walk, start: Config, warm: Config) -> Config:
    """`warm` (the candidate's best resources under this start's protocol) where it is no slower than `start`.
    Only the candidate's own walks lend their resources: another schedule's best resources can lead the walk
    to a worse local minimum (DGX-1 ReduceScatter at 16MB, 22% slower in a trial that lent them too)."""
    if warm == start:
        return start
    return warm if walk.time(warm) <= walk.time(start) else start


def _best_starts(walk: _Walk, starts: list[tuple[Candidate, Config]], keep: int) -> list[tuple[Candidate, Config]]:
    """The `keep` fastest starting points (ties: the earlier), in their order. Starts are timed in order of a
    lower bound that runs no simulation (Evaluator.bound); once `keep` are timed, a start whose bound exceeds
    the keep-th best time cannot be among them and is not simulated (branch and bound: same choice, fewer
    evaluations; at 1GB an LL start costs a 683-tile simulation)."""
    bounds = [walk.bound(config) for _, config in starts]
    times: dict[int, float] = {}
    for k in sorted(range(len(starts)), key=lambda k: (bounds[k], k)):
        if len(times) >= keep and bounds[k] > sorted(times.values())[keep - 1]:
            break  # bounds only grow from here
        times[k] = walk.time(starts[k][1])
    timed = sorted(times, key=lambda k: (times[k], k))
    return [starts[k] for k in sorted(timed[:keep])]


def _warm_start(start: Config, warm: Config, grid: Grid, candidate: Candidate) -> Config:
    changes = {axis: getattr(warm, axis) for axes in RESOURCE_AXES for axis in axes
               if getattr(warm, axis) in grid.values(axis, candidate)}
    return replace(start, **changes)


def exhaustive_size(evaluator: Evaluator, size: int, grid: Grid | None = None) -> SizeResult:
    """Every configuration of the grid at `size` (the reference the tuner is measured against)."""
    with paused_collector(promote=True):
        return _exhaustive_size(evaluator, size, grid or Grid())


def _exhaustive_size(evaluator: Evaluator, size: int, grid: Grid) -> SizeResult:
    start_clock = time.perf_counter()
    walk = _Walk(evaluator, size)
    best: Config | None = None
    best_t = math.inf
    for candidate in evaluator.candidates.values():
        for config in grid.every(candidate):
            t = walk.time(config)
            if t < best_t:
                best, best_t = config, t
    return _result(evaluator, size, best, walk, start_clock)


def _result(evaluator: Evaluator, size: int, best: Config | None, walk: _Walk, start_clock: float) -> SizeResult:
    timing = evaluator.time(best, size) if best is not None else Timing(math.inf)
    return SizeResult(size, best, timing, walk.spent, tuple(walk.trace), time.perf_counter() - start_clock,
                      walk.stopped)


@dataclass(frozen=True)
class TuneRun:
    """Tuned configurations per size of one (topology, collective); `interrupted` when Ctrl-C stopped it."""

    topology: str
    collective: str
    candidates: tuple[str, ...]
    results: tuple[SizeResult, ...]
    interrupted: bool = False

    @property
    def evaluations(self) -> int:
        return sum(r.evaluations for r in self.results)

    def to_dict(self) -> dict:  # type: ignore[type-arg]
        return {"topology": self.topology, "collective": self.collective, "candidates": list(self.candidates),
                "interrupted": self.interrupted, "evaluations": self.evaluations,
                "sizes": [r.to_dict() for r in self.results]}


def tune_sizes(evaluator: Evaluator, collective: str, sizes: Sequence[int], grid: Grid | None = None, *,
               on_size: Callable[[SizeResult], None] | None = None, descents: int | None = None,
               warm: Config | None = None) -> TuneRun:
    """Tune every size in turn (each warm-started from the previous best; the first from `warm` when given).
    Ctrl-C returns the sizes finished so far with `interrupted=True`."""
    results: list[SizeResult] = []
    interrupted = False
    try:
        for size in sizes:
            result = tune_size(evaluator, size, grid, warm, descents)
            results.append(result)
            warm = result.best or warm
            if on_size is not None:
                on_size(result)
    except KeyboardInterrupt:
        interrupted = True
    return TuneRun(evaluator.topology.name, collective, tuple(evaluator.candidates), tuple(results), interrupted)
