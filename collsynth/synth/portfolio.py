"""The search over the SCCL encodings: a portfolio of restricted and fixed-split questions raced in slices of
z3 resource units with restarts (`InstanceSolver`).

Symmetry: a topology automorphism that maps the collective to itself maps algorithms to algorithms.
`InstanceSolver` first looks for an algorithm that is *invariant* under such symmetries (one variable per
orbit of sends: a much smaller problem, and SCCL-style instances usually have symmetric solutions); only
if that restricted problem is unsatisfiable or slow does the unrestricted problem decide. An unsat answer
always comes from the unrestricted problem. Solver runs are heavy-tailed, so calls are made in rounds of
growing slices with fresh random seeds (restarts) until the caller's time limit. Slices are measured in z3's
deterministic resource units, not seconds, so which call answers first (and so which of several optimal
schedules comes back) does not depend on machine load; only the overall time limit does. All encodings of
one `InstanceSolver` share one fresh z3 context (and so one resource counter), and nothing else does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property

import z3

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.encodings.sccl_allreduce import AllReduceEncoding
from collsynth.encodings.sccl_z3 import (
    MAX_SLICE_UNITS,
    InstanceOutcome,
    SCCLEncoding,
    StepEncoding,
    Symmetry,
    instance_symmetries,
    resource_count,
)
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import is_single_cycle

# First slice of the restart schedule, in z3 resource units (the "rlimit count" statistic: about 7-8 million
# a second on the 2-core CI class, so about half a second); slices double. Units, not seconds: the same
# calls answer on an idle and on a loaded machine.
FIRST_SLICE_UNITS = 4_000_000
# Restart rounds at most (slices double each round: far beyond any time limit long before).
MAX_RESTARTS = 64
# A fixed-split task gets this share of the open question's slice.
SPLIT_SLICE_SHARE = 0.25

Task = tuple[int, tuple[int, ...] | None]  # (symmetry level, fixed split of the rounds or None: any split)


class InstanceSolver:
    """Answers "an algorithm with `steps` steps and at most R rounds?" for successive R, with a portfolio.

    Tasks: per encoding (symmetry-restricted when the instance has symmetries, then the full one), a few
    fixed splits of the R rounds over the steps (balanced first: most of the difficulty of an instance is
    finding a feasible split, and with the split fixed a schedule is found in well under a second) and the
    open question with any split. Tasks run in rounds of doubling slices of z3 resource units with fresh
    seeds (the same answers on a loaded machine; the time limit is only the overall deadline); an unsat
    answer ends a task; only the full encoding's open question (or every split of it) proves unsat.
    Encodings are built on first use and kept for the next question (they keep what they learnt)."""

    SPLITS_PER_ENCODING = 6

    def __init__(self, topology: Topology, collective: Collective, steps: int, *, use_symmetry: bool = True,
                 interruptible: bool = True, max_rounds: int | None = None, budget: int | None = None,
                 deadline: float | None = None, context: z3.Context | None = None) -> None:
        self.interruptible = interruptible
        # The caller's overall deadline (a time.perf_counter() value): an encoding that could not be built by
        # then is not started (building is not interruptible); the answer is then a time-out.
        self.deadline = deadline
        # At most this many z3 resource units per question (then a time-out): a cap on work, not on time.
        self.budget = budget
        self.max_rounds = max_rounds  # no question will ask for more (keeps the encodings small)
        self.topology = topology
        self.collective = collective
        self.steps = steps
        # The z3 context of this solver's encodings: a fresh one, or the one of the synthesis run it belongs to
        # (a run's solvers share one, as they shared a process before: the same answers as then)
        self.context = context if context is not None else z3.Context()
        combining = collective.combining and collective.name == "allreduce"
        self._kind: type[StepEncoding] = AllReduceEncoding if combining else SCCLEncoding
        self._use_symmetry = use_symmetry
        self._encodings: dict[int, StepEncoding] = {}
        self._restricted_unsat: dict[int, int] = {}  # level -> the largest R for which it answered unsat

    @cached_property
    def _levels(self) -> list[Sequence[Symmetry]]:
        """The encodings' symmetry restrictions, strongest first, the unrestricted one last (found on first use:
        a question refused at its deadline costs no symmetry search)."""
        collective = self.collective
        symmetries = instance_symmetries(self.topology, collective) if self._use_symmetry else []
        if self._kind is AllReduceEncoding:
            # every chunk is summed everywhere; symmetric schedules rotate chunk r*C+i with its rank r
            symmetries = [(ranks, tuple(ranks[c // collective.chunks] * collective.chunks + c % collective.chunks
                                        for c in range(collective.num_chunks))) for ranks, _ in symmetries]
        levels: list[Sequence[Symmetry]] = [symmetries] if symmetries else []
        rotations = [g for g in symmetries if is_single_cycle(g[0])]
        if rotations and len(symmetries) > 1:
            levels.append(rotations[:1])  # weaker: a rotation alone (reflections may rule schedules out)
        levels.append(())
        return levels

    @property
    def full(self) -> StepEncoding:
        return self._encoding(len(self._levels) - 1)

    def _encoding(self, level: int) -> StepEncoding:
        if level not in self._encodings:
            self._encodings[level] = self._kind(self.topology, self.collective, self.steps,
                                                symmetries=self._levels[level], interruptible=self.interruptible,
                                                max_rounds=self.max_rounds, context=self.context)
        return self._encodings[level]

    def _can_build_by_deadline(self) -> bool:
        if self.deadline is None:
            return True
        from collsynth.synth.size import estimated_build_seconds

        left = self.deadline - time.perf_counter()
        return estimated_build_seconds(self.topology, self.collective, self.steps) <= left

    @property
    def max_useful_rounds(self) -> int:
        return self.full.max_useful_rounds

    def solve(self, max_rounds: int, time_limit: float | None = None) -> InstanceOutcome:
        """The portfolio answer; unsat only from the unrestricted encoding; timeout after `time_limit` seconds
        or once the solver's `budget` of resource units is spent."""
        start = time.perf_counter()
        if max_rounds < self.steps:  # every step takes a round: no encoding needed to say so
            return InstanceOutcome(Status.UNSAT, self.collective.chunks, self.steps, max_rounds, None, 0.0)
        if not self._encodings and not self._can_build_by_deadline():
            return InstanceOutcome(Status.TIMEOUT, self.collective.chunks, self.steps, max_rounds, None, 0.0)
        if self.full.infeasible_reason is not None or max_rounds < self.steps:
            return self.full.solve(max_rounds)
        if max_rounds >= self.full.max_useful_rounds:
            # Any split will do: the open question is easy. Unlimited rounds are always enough.
            left = None if time_limit is None else max(0.001, start + time_limit - time.perf_counter())
            outcome = self.full.solve(max_rounds, left, units=self.budget)
            return _with_seconds(outcome, time.perf_counter() - start)
        splits = balanced_splits(max_rounds, [1 + len(x) for x in self.full.extra], self.SPLITS_PER_ENCODING + 1)
        complete = len(splits) <= self.SPLITS_PER_ENCODING  # then refuting every split proves unsat
        race = _Race(self, max_rounds, splits[:self.SPLITS_PER_ENCODING], complete,
                     None if time_limit is None else start + time_limit)
        answer = race.run()
        if answer is None:
            answer = InstanceOutcome(Status.TIMEOUT, self.collective.chunks, self.steps, max_rounds, None, 0.0)
        return _with_seconds(answer, time.perf_counter() - start)


class _Race:
    """One question raced over the portfolio's tasks in rounds of doubling slices (see `InstanceSolver`)."""

    def __init__(self, solver: InstanceSolver, max_rounds: int, splits: list[tuple[int, ...]], complete: bool,
                 deadline: float | None) -> None:
        self.solver, self.max_rounds, self.splits, self.complete = solver, max_rounds, splits, complete
        self.deadline = deadline
        self.full_level = len(solver._levels) - 1
        self.units_at_start = resource_count(solver.full.solver)
        self.refuted: set[tuple[int, ...]] = set()
        self.tasks: list[Task] = []
        for level in range(len(solver._levels)):
            if level == self.full_level or solver._restricted_unsat.get(level, -1) < max_rounds:
                self.tasks += [(level, split) for split in splits] + [(level, None)]

    def _left(self) -> tuple[float | None, int | None]:
        """Seconds and resource units left (None: no limit)."""
        left = None if self.deadline is None else self.deadline - time.perf_counter()
        spent = resource_count(self.solver.full.solver) - self.units_at_start
        return left, None if self.solver.budget is None else self.solver.budget - spent

    def run(self) -> InstanceOutcome | None:
        """The sat answer, the unsat proof, or None when time or budget ran out."""
        for attempt in range(MAX_RESTARTS):
            for task in list(self.tasks):
                if task not in self.tasks:
                    continue
                left, units_left = self._left()
                if (left is not None and left <= 0) or (units_left is not None and units_left <= 0):
                    return None
                level, split = task
                if level not in self.solver._encodings and not self.solver._can_build_by_deadline():
                    self.tasks = [x for x in self.tasks if x[0] != level]  # no time left to build it
                    continue
                outcome = self.solver._encoding(level).solve(self.max_rounds, left, seed=attempt, split=split,
                                                             units=self._slice(task, attempt, units_left))
                if outcome.status == Status.SAT or (outcome.status == Status.UNSAT and self._refute(task)):
                    return outcome
        return None

    def _slice(self, task: Task, attempt: int, units_left: int | None) -> int | None:
        share = 1.0 if task[1] is None and task[0] == self.full_level else SPLIT_SLICE_SHARE
        units: int | None = min(int(FIRST_SLICE_UNITS * share) << attempt, MAX_SLICE_UNITS)
        if len(self.tasks) == 1:
            units = None  # alone: no reason to cut the run short
        if units_left is not None:
            units = units_left if units is None else min(units, units_left)
        return units

    def _refute(self, task: Task) -> bool:
        """Record an unsat answer to `task`; True when it proves the question unsat."""
        level, split = task
        if split is not None:
            self.tasks.remove(task)
            if level == self.full_level:
                self.refuted.add(split)
                return self.complete and len(self.refuted) == len(self.splits)
            return False
        if level == self.full_level:
            return True
        self.solver._restricted_unsat[level] = self.max_rounds
        self.tasks = [x for x in self.tasks if x[0] != level]
        return False


def balanced_splits(rounds: int, caps: Sequence[int], limit: int) -> list[tuple[int, ...]]:
    """Up to `limit` ways to split `rounds` over len(caps) steps (1 <= R_t <= caps[t]), most balanced first
    (smallest largest step), and among those the ones with more rounds in later steps first."""
    steps = len(caps)
    found: list[tuple[int, ...]] = []
    for top in range(max(1, -(-rounds // steps)), max(caps, default=1) + 1):
        level: list[tuple[int, ...]] = []

        def extend(prefix: tuple[int, ...], left: int, top: int = top, level: list = level) -> None:
            t = len(prefix)
            if t == steps:
                if left == 0 and max(prefix) == top:
                    level.append(prefix)
                return
            rest = steps - t - 1
            for r in range(1, min(top, caps[t], left - rest) + 1):
                if left - r <= top * rest:
                    extend(prefix + (r,), left - r)

        extend((), rounds)
        level.sort(key=lambda split: -sum(t * r for t, r in enumerate(split)))
        found += level
        if len(found) >= limit:
            break
    return found[:limit]


def _with_seconds(outcome: InstanceOutcome, seconds: float) -> InstanceOutcome:
    return InstanceOutcome(outcome.status, outcome.chunks, outcome.steps, outcome.rounds, outcome.schedule, seconds)
