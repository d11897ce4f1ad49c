"""One frontier sweep of a non-combining (or dual) collective over chunk counts and steps (see
`collsynth.synth.pareto` for the search), serial or over worker processes.

Across the process boundary go frozen dataclasses (`ChunkTask` in, `ChunkFindings` out): they pickle as
they are. Deadlines are `time.perf_counter()` values in the parent; a worker gets the seconds left."""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from fractions import Fraction
from math import ceil
from typing import Any

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.encodings.bounds import lower_bound_steps
from collsynth.encodings.sccl_z3 import InstanceOutcome, Schedule
from collsynth.schedule import FEASIBLE, OPTIMAL, Attempt, FrontierPoint
from collsynth.synth.instance import least_rounds
from collsynth.synth.parallel import make_pool, stop_pool
from collsynth.synth.portfolio import InstanceSolver
from collsynth.synth.problem import algorithm_name, encodable, schedule_to_algorithm, solver_provenance
from collsynth.synth.sccl_greedy import greedy_schedule
from collsynth.synth.size import rounds_per_chunk_bound
from collsynth.topologies import Topology

# The direct AllReduce encoding is much harder than the composition it tries to beat: its calls get at most
# this many z3 resource units of search (about 5 s on the 2-core CI class, 10 s with building the encodings;
# units, so that the same calls time out on an idle and on a loaded machine), and its sweep ends at the first
# chunk count that found nothing new and timed out.
DIRECT_BUDGET_UNITS = 40_000_000

BOUND_MET = "bandwidth bound met"
MAX_CHUNKS = "max chunks reached"
INTERRUPTED = "interrupted"
GAVE_UP = "direct encoding out of reach"
TIME_LIMIT = "time limit reached"

# Events for progress display and incremental reports: ("bounds", {"steps", "rounds_per_chunk", "sweeps"})
# first; ("attempt", Attempt) per solver call; ("point", FrontierPoint) per point of the collective asked for
# (AllReduce: its composed points, at once); ("chunks", C) when a sweep finished chunk count C.
EventHandler = Callable[[str, Any], None]


@dataclass(frozen=True)
class SweepLimits:
    max_chunks: int
    time_limit: float | None  # seconds per solver call
    jobs: int
    max_steps: int | None
    deadline: float | None  # time.perf_counter() at which the whole sweep ends
    context: Any = None  # the run's z3 context for serial sweeps (workers make their own)

    def seconds_left(self) -> float | None:
        return None if self.deadline is None else self.deadline - time.perf_counter()


@dataclass(frozen=True)
class FoundPoint:
    """A point as a worker finds it: (C is the task's) steps, fewest rounds, status, seconds, the schedule."""

    steps: int
    rounds: int
    status: str
    seconds: float
    schedule: Schedule


@dataclass(frozen=True)
class ChunkTask:
    """The sweep of one chunk count: what `explore_chunks` needs (see there)."""

    topology: Topology
    collective: Collective
    steps_lb: int
    ratio_lb: Fraction
    known: tuple[tuple[int, Fraction], ...]  # steps -> best R/C known at exactly those steps
    time_limit: float | None
    max_steps: int
    part: str | None = None
    seconds_left: float | None = None  # the whole sweep's time left when the task starts


@dataclass(frozen=True)
class ChunkFindings:
    attempts: tuple[Attempt, ...]
    points: tuple[FoundPoint, ...]
    out_of_time: bool = False  # the sweep's deadline passed during the task


def explore_chunks(task: ChunkTask, *, interruptible: bool = True, on_attempt: Callable[[Attempt], None] | None = None,
                   on_point: Callable[[FoundPoint], None] | None = None, context: Any = None) -> ChunkFindings:
    """The sweep for one chunk count C (the collective's chunk factor) of a non-combining collective: for
    S = steps_lb, ..., the fewest R that beats every known point with <= S steps."""
    deadline = None if task.seconds_left is None else time.perf_counter() + task.seconds_left
    own = dict(task.known)
    attempts: list[Attempt] = []
    points: list[FoundPoint] = []

    def record(attempt: Attempt) -> None:
        attempts.append(attempt)
        if on_attempt is not None:
            on_attempt(attempt)

    for steps in range(max(1, task.steps_lb), task.max_steps + 1):
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            return ChunkFindings(tuple(attempts), tuple(points), out_of_time=True)
        caps = [ratio for s, ratio in own.items() if s <= steps]
        upper = ceil(min(caps) * task.collective.chunks) - 1 if caps else None
        if upper is not None and upper < max(steps, ceil(task.ratio_lb * task.collective.chunks)):
            break  # nothing with >= these steps can beat what is known
        point, timed_out = _explore_steps(task, steps, upper, left, interruptible, record, context)
        if task.part == "direct" and timed_out:
            break  # larger S only gets harder for this encoding
        if point is None:
            continue
        points.append(point)
        if on_point is not None:
            on_point(point)
        ratio = Fraction(point.rounds, task.collective.chunks)
        own[steps] = min(own.get(steps, ratio), ratio)
        if ratio <= task.ratio_lb:
            break
    return ChunkFindings(tuple(attempts), tuple(points))


def explore_chunks_task(task: ChunkTask) -> ChunkFindings:
    """`explore_chunks` in a worker process (spawn-safe, top level; Ctrl-C is the parent's to handle)."""
    return explore_chunks(task, interruptible=False)


def _explore_steps(task: ChunkTask, steps: int, upper: int | None, left: float | None, interruptible: bool,
                   record: Callable[[Attempt], None], context: Any) -> tuple[FoundPoint | None, bool]:
    """The fewest rounds for (C, S) below `upper` (None: any); (the point or None, whether a call timed out)."""
    collective = task.collective
    # a quick schedule bounds the question (and answers it if the solver times out)
    greedy = None if collective.combining else greedy_schedule(task.topology, collective, steps)
    greedy_rounds = sum(r for r, _ in greedy) if greedy is not None else None
    if greedy_rounds is not None and (upper is None or greedy_rounds <= upper):
        upper = greedy_rounds
    else:
        greedy = None
    solver = InstanceSolver(task.topology, collective, steps, interruptible=interruptible, max_rounds=upper,
                            budget=DIRECT_BUDGET_UNITS if task.part == "direct" else None,
                            deadline=None if left is None else time.perf_counter() + left, context=context)
    limit = left if task.time_limit is None else task.time_limit if left is None else min(task.time_limit, left)
    lower = max(steps, ceil(task.ratio_lb * collective.chunks))
    before = time.perf_counter()
    best, proven, tried = least_rounds(solver, lower, upper, limit, task.part, record)
    timed_out = tried[-1].result == Status.TIMEOUT
    if best is None and greedy is not None and upper is not None and timed_out:
        best = InstanceOutcome(Status.SAT, collective.chunks, steps, upper, greedy, 0.0)
    if best is None or best.status != Status.SAT or best.schedule is None:
        return None, timed_out
    seconds = round(time.perf_counter() - before, 3)
    return FoundPoint(steps, best.rounds, OPTIMAL if proven else FEASIBLE, seconds, best.schedule), timed_out


class Sweep:
    """One frontier sweep of a DIRECT or DUAL collective (state kept so Ctrl-C can report it)."""

    def __init__(self, topology: Topology, base: Collective, limits: SweepLimits, notify: EventHandler,
                 part: str | None = None, bounds: tuple[int, Fraction] | None = None,
                 seed: tuple[FrontierPoint, ...] = ()) -> None:
        self.topology, self.base, self.limits = topology, base, limits
        self.enc_topology, self.enc_base = encodable(topology, base)
        if bounds is None:
            bounds = lower_bound_steps(topology, base), rounds_per_chunk_bound(topology, base)
        self.steps_lb, self.ratio_lb = bounds
        self.max_steps = limits.max_steps if limits.max_steps is not None else self.steps_lb + topology.num_ranks
        self.notify, self.part = notify, part
        self.points: list[FrontierPoint] = []
        self.tried: list[Attempt] = []
        self.seed = seed  # points known from elsewhere: only better ones are looked for

    def run(self) -> str:
        """Sweep; returns why it stopped (BOUND_MET, MAX_CHUNKS, GAVE_UP or TIME_LIMIT)."""
        return self._run_serial() if self.limits.jobs == 1 else self._run_parallel()

    def _known(self) -> tuple[tuple[int, Fraction], ...]:
        best: dict[int, Fraction] = {}
        for p in (*self.seed, *self.points):
            best[p.steps] = min(best.get(p.steps, p.rounds_per_chunk), p.rounds_per_chunk)
        return tuple(sorted(best.items()))

    def task(self, chunks: int) -> ChunkTask:
        return ChunkTask(self.enc_topology, self.enc_base.split(chunks), self.steps_lb, self.ratio_lb, self._known(),
                         self.limits.time_limit, self.max_steps, self.part, self.limits.seconds_left())

    def _run_serial(self) -> str:
        for chunks in range(1, self.limits.max_chunks + 1):
            left = self.limits.seconds_left()
            if left is not None and left <= 0:
                return TIME_LIMIT
            met: list[bool] = []

            def accept(point: FoundPoint, chunks: int = chunks, met: list[bool] = met) -> None:
                met.append(self._accept(chunks, point))

            found = explore_chunks(self.task(chunks), on_attempt=self._attempt, on_point=accept,
                                   context=self.limits.context)
            self.notify("chunks", chunks)
            if any(met):
                return BOUND_MET
            if found.out_of_time:
                return TIME_LIMIT
            if self._hopeless(found):
                return GAVE_UP
        return MAX_CHUNKS

    def _hopeless(self, found: ChunkFindings) -> bool:
        """The direct AllReduce sweep stops at a chunk count that found nothing and hit a time-out."""
        return (self.part == "direct" and not found.points
                and any(a.result == Status.TIMEOUT for a in found.attempts))

    def _run_parallel(self) -> str:
        pool = make_pool(self.limits.jobs)
        running: dict[Future[ChunkFindings], int] = {}
        done: dict[int, ChunkFindings] = {}
        next_chunks, accepted, stop_at, stopped = 1, 0, self.limits.max_chunks + 1, MAX_CHUNKS
        try:
            while accepted < min(stop_at - 1, self.limits.max_chunks):
                while len(running) < self.limits.jobs and next_chunks < stop_at:
                    running[pool.submit(explore_chunks_task, self.task(next_chunks))] = next_chunks
                    next_chunks += 1
                left = self.limits.seconds_left()
                finished, _ = wait(list(running), timeout=None if left is None else max(left, 0) + 1,
                                   return_when=FIRST_COMPLETED)
                if not finished:
                    return TIME_LIMIT  # the workers keep to the deadline too; this is the parent's backstop
                for future in finished:
                    done[running.pop(future)] = future.result()
                # accept in chunk order so that caps and the report follow the serial sweep
                while accepted + 1 in done:
                    accepted += 1
                    verdict = self._accept_findings(accepted, done.pop(accepted))
                    if verdict is not None:
                        stop_at, stopped = accepted + 1, verdict
        finally:
            stop_pool(pool)
        return stopped

    def _accept_findings(self, chunks: int, found: ChunkFindings) -> str | None:
        """Take a worker's findings for `chunks`; why the sweep stops there, or None to go on."""
        for attempt in found.attempts:
            self._attempt(attempt)
        met = [self._accept(chunks, point) for point in found.points]
        self.notify("chunks", chunks)
        if any(met):
            return BOUND_MET
        if found.out_of_time:
            return TIME_LIMIT
        return GAVE_UP if self._hopeless(found) else None

    def _attempt(self, attempt: Attempt) -> None:
        self.tried.append(attempt)
        self.notify("attempt", attempt)

    def _accept(self, chunks: int, found: FoundPoint) -> bool:
        """Turn a found point into a verified algorithm and report it; True when it meets the bandwidth bound."""
        collective = self.base.split(chunks)
        name = algorithm_name(collective, self.topology, chunks, found.steps, found.rounds)
        provenance = {**solver_provenance(), "seconds": found.seconds, "status": found.status}
        algorithm = schedule_to_algorithm(name, self.topology, collective, found.schedule, provenance)
        point = FrontierPoint(chunks, found.steps, found.rounds, found.status, algorithm, found.seconds)
        self.points.append(point)
        if self.part in (None, "direct"):  # a half of AllReduce: its points are not the answer
            self.notify("point", point)
        return point.rounds_per_chunk <= self.ratio_lb
