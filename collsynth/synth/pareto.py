"""The Pareto frontier of latency (steps S) against bandwidth (rounds per chunk R/C), SCCL-style.

Sweep: chunk counts C = 1, 2, ... For each C, steps S from the step lower bound upward, find the fewest
rounds R for (C, S) *among those that would beat every point found so far with at most S steps*
(R/C strictly below their best R/C): anything else is dominated, so the solver is only asked
"R <= ceil(best * C) - 1?". The S loop for a C ends when that cap falls below max(S, ceil(bound * C)).
Every R/C fraction is tried, reduced or not (6/3 is not skipped because 2/1 was tried: at 3 steps it may
be feasible where 2/1 at 1 step is not). The sweep stops after the first C whose point meets the
bandwidth lower bound (no point can beat it), or at `max_chunks`.

A point (C, S, R) is Pareto-optimal when no other point has <= S and <= R/C with one strict (points
with the same S and R/C: the one with fewer chunks). Its status is "optimal" when fewer rounds were
proved impossible for (C, S) (or R meets the bound) and "feasible" when a time-out left that open.

AllReduce: the frontiers of ReduceScatter and AllGather are swept (once when the topology equals its
reverse: then they coincide) and composed: (C1, S1, R1) + (C2, S2, R2) is (C, S1 + S2, C*(R1/C1 + R2/C2))
with C = lcm(C1, C2) <= max_chunks, each half's chunks split to C. Then the direct AllReduce encoding is
swept with the composed points as the points to beat (it finds lower-latency points the composition
cannot reach, e.g. fewer steps than the two halves' step bounds added).

Chunk counts can run in parallel processes (`jobs`): a C started before an earlier C finished uses the
caps known at its start (it may find extra, dominated points; the frontier is the same).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from fractions import Fraction
from math import ceil, lcm
from typing import Any

from collsynth.collectives import Collective
from collsynth.encodings.bounds import lower_bound_rounds_per_chunk, lower_bound_steps
from collsynth.encodings.sccl_z3 import (
    SAT,
    TIMEOUT,
    InstanceOutcome,
    InstanceSolver,
    greedy_schedule,
    reversed_topology,
)
from collsynth.schedule.algorithm import Algorithm
from collsynth.synth.instance import Attempt, SynthesisError, algorithm_name, least_rounds, solver_provenance
from collsynth.synth.parallel import explore_chunks_task, make_pool, stop_pool
from collsynth.synth.problem import (
    COMPOSED,
    allreduce_parts,
    collective_from_wire,
    collective_to_wire,
    concatenate,
    encodable,
    scaled,
    schedule_from_wire,
    schedule_to_algorithm,
    schedule_to_wire,
    split_chunks,
    strategy,
    unit,
)
from collsynth.topologies import Topology

# The direct AllReduce encoding is much harder than the composition it tries to beat: its calls get at most
# this many z3 resource units of search (about 5 s on the 2-core CI class, 10 s with building the encodings;
# units, so that the same calls time out on an idle and on a loaded machine), and its sweep ends at the first
# chunk count that found nothing new and timed out.
DIRECT_BUDGET_UNITS = 40_000_000

OPTIMAL = "optimal"
FEASIBLE = "feasible"
BOUND_MET = "bandwidth bound met"
MAX_CHUNKS = "max chunks reached"
INTERRUPTED = "interrupted"
GAVE_UP = "direct encoding out of reach"


@dataclass(frozen=True)
class ParetoPoint:
    """Algorithm with C chunks, S steps and R rounds: the fewest R found for (C, S)."""

    chunks: int
    steps: int
    rounds: int
    status: str  # OPTIMAL or FEASIBLE
    algorithm: Algorithm | None = field(default=None, compare=False)
    seconds: float = field(default=0.0, compare=False)

    @property
    def rounds_per_chunk(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)

    def dominates(self, other: ParetoPoint) -> bool:
        """At most as many steps and at most the R/C of `other`, one of them strictly fewer."""
        le = self.steps <= other.steps and self.rounds_per_chunk <= other.rounds_per_chunk
        return le and (self.steps < other.steps or self.rounds_per_chunk < other.rounds_per_chunk)

    def to_dict(self) -> dict[str, Any]:
        return {"chunks": self.chunks, "steps": self.steps, "rounds": self.rounds, "status": self.status}


def pareto_optimal(points: tuple[ParetoPoint, ...] | list[ParetoPoint]) -> tuple[ParetoPoint, ...]:
    """The non-dominated points, by steps; of points with equal (S, R/C) the one with fewest chunks."""
    best: dict[tuple[int, Fraction], ParetoPoint] = {}
    for p in points:
        key = (p.steps, p.rounds_per_chunk)
        if key not in best or p.chunks < best[key].chunks:
            best[key] = p
    kept = [p for p in best.values() if not any(q.dominates(p) for q in best.values())]
    return tuple(sorted(kept, key=lambda p: (p.steps, p.rounds_per_chunk)))


@dataclass(frozen=True)
class ParetoResult:
    topology: Topology
    collective: Collective  # one chunk per slot; points carry their own chunk counts
    steps_lower_bound: int
    rounds_per_chunk_lower_bound: Fraction
    sat_points: tuple[ParetoPoint, ...]  # every (C, S, fewest R) found, dominated ones included
    tried: tuple[Attempt, ...]
    stopped: str  # BOUND_MET, MAX_CHUNKS or INTERRUPTED
    seconds: float

    @property
    def pareto(self) -> tuple[ParetoPoint, ...]:
        return pareto_optimal(self.sat_points)

    @property
    def bound_met(self) -> bool:
        return any(p.rounds_per_chunk <= self.rounds_per_chunk_lower_bound for p in self.sat_points)

    def to_dict(self) -> dict[str, Any]:
        """The `collsynth synth pareto --json` document."""
        return {
            "topology": self.topology.name,
            "collective": self.collective.name,
            "lower_bounds": {"steps": self.steps_lower_bound,
                             "rounds_per_chunk": str(self.rounds_per_chunk_lower_bound)},
            "frontier": [p.to_dict() for p in self.pareto],
            "tried": [a.to_dict() for a in self.tried],
            "stopped": self.stopped,
            "seconds": round(self.seconds, 3),
        }


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep; `result` holds every point finished before it."""

    def __init__(self, result: ParetoResult) -> None:
        super().__init__("sweep interrupted")
        self.result = result


# Events for progress display and incremental reports: ("bounds", {"steps", "rounds_per_chunk", "sweeps"})
# first; ("attempt", Attempt) per solver call; ("point", ParetoPoint) per point of the collective asked for
# (AllReduce: its composed points, at the end); ("chunks", C) when a sweep finished chunk count C.
EventHandler = Callable[[str, Any], None]


def pareto_frontier(topology: Topology, collective: Collective, *, max_chunks: int = 8,
                    time_limit: float | None = 60.0, jobs: int = 1, max_steps: int | None = None,
                    on_event: EventHandler | None = None) -> ParetoResult:
    """Sweep the (steps, rounds per chunk) frontier of `collective` on `topology` (see the module docstring).

    `time_limit` applies to every solver call (a time-out is recorded as such, never as unsat); `jobs`
    chunk counts run in parallel processes; `max_steps` caps S while no point is known yet (default: the
    step lower bound + the number of ranks). Ctrl-C raises SweepInterrupted carrying the partial result."""
    if max_chunks < 1:
        raise SynthesisError(f"max chunks must be >= 1, got {max_chunks}")
    if jobs < 1:
        raise SynthesisError(f"jobs must be >= 1, got {jobs}")
    base = unit(collective)
    notify = on_event or (lambda kind, payload: None)
    start = time.perf_counter()
    steps_lb = lower_bound_steps(topology, base)
    ratio_lb = lower_bound_rounds_per_chunk(topology, base)
    composed = strategy(base) == COMPOSED
    sweeps = 1 if not composed else 2 if _same_links(topology, reversed_topology(topology)) else 3
    notify("bounds", {"steps": steps_lb, "rounds_per_chunk": ratio_lb, "sweeps": sweeps})
    if composed:
        return _allreduce_frontier(topology, base, steps_lb, ratio_lb, max_chunks, time_limit, jobs, max_steps,
                                   notify, start)
    sweep = _Sweep(topology, base, max_chunks, time_limit, jobs, max_steps, notify, bounds=(steps_lb, ratio_lb))
    try:
        points, tried, stopped = sweep.run()
    except KeyboardInterrupt:
        raise SweepInterrupted(ParetoResult(topology, base, steps_lb, ratio_lb, tuple(sweep.points), tuple(sweep.tried),
                                            INTERRUPTED, time.perf_counter() - start)) from None
    return ParetoResult(topology, base, steps_lb, ratio_lb, points, tried, stopped, time.perf_counter() - start)


class _Sweep:
    """One frontier sweep of a DIRECT or DUAL collective (state kept so Ctrl-C can report it)."""

    def __init__(self, topology: Topology, base: Collective, max_chunks: int, time_limit: float | None, jobs: int,
                 max_steps: int | None, notify: EventHandler, part: str | None = None,
                 bounds: tuple[int, Fraction] | None = None, seed: tuple[ParetoPoint, ...] = ()) -> None:
        self.topology, self.base = topology, base
        self.enc_topology, self.enc_base = encodable(topology, base)
        if bounds is None:
            bounds = lower_bound_steps(topology, base), lower_bound_rounds_per_chunk(topology, base)
        self.steps_lb, self.ratio_lb = bounds
        self.max_chunks, self.time_limit, self.jobs = max_chunks, time_limit, jobs
        self.max_steps = max_steps if max_steps is not None else self.steps_lb + topology.num_ranks
        self.notify, self.part = notify, part
        self.points: list[ParetoPoint] = []
        self.tried: list[Attempt] = []
        self.seed = seed  # points known from elsewhere: only better ones are looked for

    def run(self) -> tuple[tuple[ParetoPoint, ...], tuple[Attempt, ...], str]:
        stopped = self._run_serial() if self.jobs == 1 else self._run_parallel()
        return tuple(self.points), tuple(self.tried), stopped

    def _known(self) -> dict[int, Fraction]:
        best: dict[int, Fraction] = {}
        for p in (*self.seed, *self.points):
            best[p.steps] = min(best.get(p.steps, p.rounds_per_chunk), p.rounds_per_chunk)
        return best

    def _run_serial(self) -> str:
        for chunks in range(1, self.max_chunks + 1):
            collective = split_chunks(self.enc_base, chunks)
            found = explore_chunks(self.enc_topology, collective, self.steps_lb, self.ratio_lb, self._known(),
                                   self.time_limit, self.max_steps, part=self.part, on_attempt=self._attempt,
                                   stop_at_timeout=self.part == "direct")
            met = self._accept(chunks, found["points"])
            self.notify("chunks", chunks)
            if met:
                return BOUND_MET
            if self._hopeless(found):
                return GAVE_UP
        return MAX_CHUNKS

    def _hopeless(self, found: dict[str, Any]) -> bool:
        """The direct AllReduce sweep stops at a chunk count that found nothing and hit a time-out."""
        return (self.part == "direct" and not found["points"]
                and any(a["result"] == TIMEOUT for a in found["attempts"]))

    def _run_parallel(self) -> str:
        pool = make_pool(self.jobs)
        running: dict[Future, int] = {}
        done: dict[int, dict[str, Any]] = {}
        next_chunks, accepted, stop_at, gave_up = 1, 0, self.max_chunks + 1, False
        try:
            while accepted < min(stop_at - 1, self.max_chunks):
                while len(running) < self.jobs and next_chunks < stop_at:
                    payload = self._payload(next_chunks)
                    running[pool.submit(explore_chunks_task, payload)] = next_chunks
                    next_chunks += 1
                finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                for future in finished:
                    done[running.pop(future)] = future.result()
                # accept in chunk order so that caps and the report follow the serial sweep
                while accepted + 1 in done:
                    accepted += 1
                    found = done.pop(accepted)
                    for data in found["attempts"]:
                        self._attempt(Attempt(**data))
                    if self._accept(accepted, found["points"]):
                        stop_at = accepted + 1
                    elif self._hopeless(found):
                        stop_at, gave_up = accepted + 1, True
                    self.notify("chunks", accepted)
        finally:
            stop_pool(pool)
        if gave_up:
            return GAVE_UP
        return BOUND_MET if stop_at <= self.max_chunks else MAX_CHUNKS

    def _payload(self, chunks: int) -> dict[str, Any]:
        return {"topology": self.enc_topology.to_dict(),
                "collective": collective_to_wire(split_chunks(self.enc_base, chunks)),
                "steps_lb": self.steps_lb, "ratio_lb": [self.ratio_lb.numerator, self.ratio_lb.denominator],
                "known": [[s, r.numerator, r.denominator] for s, r in self._known().items()],
                "time_limit": self.time_limit, "max_steps": self.max_steps, "part": self.part}

    def _attempt(self, attempt: Attempt) -> None:
        self.tried.append(attempt)
        self.notify("attempt", attempt)

    def _accept(self, chunks: int, found: list[dict[str, Any]]) -> bool:
        """Turn a chunk count's points into verified algorithms; True when one meets the bandwidth bound."""
        collective = split_chunks(self.base, chunks)
        met = False
        for data in found:
            name = algorithm_name(collective, self.topology, chunks, data["steps"], data["rounds"])
            provenance = {**solver_provenance(), "seconds": data["seconds"], "status": data["status"]}
            algorithm = schedule_to_algorithm(name, self.topology, collective, schedule_from_wire(data["schedule"]),
                                              provenance)
            point = ParetoPoint(chunks, data["steps"], data["rounds"], data["status"], algorithm, data["seconds"])
            self.points.append(point)
            if self.part in (None, "direct"):  # a half of AllReduce: its points are not the answer
                self.notify("point", point)
            met |= point.rounds_per_chunk <= self.ratio_lb
        return met


def explore_chunks(topology: Topology, collective: Collective, steps_lb: int, ratio_lb: Fraction,
                   known: dict[int, Fraction], time_limit: float | None, max_steps: int, *, part: str | None = None,
                   interruptible: bool = True, stop_at_timeout: bool = False,
                   on_attempt: Callable[[Attempt], None] | None = None) -> dict[str, Any]:
    """The sweep for one chunk count C (the collective's chunk factor) of a non-combining collective:
    for S = steps_lb, ..., the fewest R that beats every known point with <= S steps. `known` maps steps to
    the best R/C known at exactly those steps. Returns plain data: {"attempts": [...], "points": [...]}."""
    chunks = collective.chunks
    own = dict(known)
    attempts: list[Attempt] = []
    points: list[dict[str, Any]] = []

    def record(attempt: Attempt) -> None:
        attempts.append(attempt)
        if on_attempt is not None:
            on_attempt(attempt)

    for steps in range(max(1, steps_lb), max_steps + 1):
        caps = [ratio for s, ratio in own.items() if s <= steps]
        lower = max(steps, ceil(ratio_lb * chunks))
        upper = ceil(min(caps) * chunks) - 1 if caps else None
        if upper is not None and upper < lower:
            break  # nothing with >= these steps can beat what is known
        # a quick schedule bounds the question (and answers it if the solver times out)
        greedy = None if collective.combining else greedy_schedule(topology, collective, steps)
        greedy_rounds = sum(r for r, _ in greedy) if greedy is not None else None
        if greedy_rounds is not None and (upper is None or greedy_rounds <= upper):
            upper = greedy_rounds
        else:
            greedy = None
        solver = InstanceSolver(topology, collective, steps, interruptible=interruptible, max_rounds=upper,
                                budget=DIRECT_BUDGET_UNITS if part == "direct" else None)
        best, proven, tried = least_rounds(solver, lower, upper, time_limit, part, record)
        if best is None and greedy is not None and tried[-1].result == TIMEOUT:
            best = InstanceOutcome(SAT, chunks, steps, upper, greedy, 0.0)
        if stop_at_timeout and tried[-1].result == TIMEOUT:
            break  # larger S only gets harder for this encoding
        if best is None or best.status != SAT or best.schedule is None:
            continue
        status = OPTIMAL if proven else FEASIBLE
        seconds = round(sum(a.seconds for a in attempts if a.steps == steps), 3)
        points.append({"steps": steps, "rounds": best.rounds, "status": status, "seconds": seconds,
                       "schedule": schedule_to_wire(best.schedule)})
        ratio = Fraction(best.rounds, chunks)
        own[steps] = min(own.get(steps, ratio), ratio)
        if ratio <= ratio_lb:
            break
    return {"attempts": [a.__dict__.copy() for a in attempts], "points": points}


def explore_chunks_from_payload(payload: dict[str, Any], *, interruptible: bool) -> dict[str, Any]:
    """`explore_chunks` from the plain data a worker process receives."""
    return explore_chunks(Topology.from_dict(payload["topology"]), collective_from_wire(payload["collective"]),
                          payload["steps_lb"], Fraction(*payload["ratio_lb"]),
                          {s: Fraction(a, b) for s, a, b in payload["known"]}, payload["time_limit"],
                          payload["max_steps"], part=payload["part"], interruptible=interruptible,
                          stop_at_timeout=payload["part"] == "direct")


# --- AllReduce: compose the two halves' frontiers -------------------------------------------------

def _allreduce_frontier(topology: Topology, base: Collective, steps_lb: int, ratio_lb: Fraction, max_chunks: int,
                        time_limit: float | None, jobs: int, max_steps: int | None, notify: EventHandler,
                        start: float) -> ParetoResult:
    """Compose the ReduceScatter and AllGather frontiers, then sweep the direct AllReduce encoding for
    anything better than the composition (fewer steps, or fewer rounds per chunk at the same steps)."""
    rs, ag = allreduce_parts(base)
    symmetric = _same_links(topology, reversed_topology(topology))
    halves: dict[str, _Sweep] = {}
    kept: tuple[ParetoPoint, ...] = ()
    try:
        for part, coll in (("allgather", ag), ("reducescatter", rs)):
            if part == "reducescatter" and symmetric:
                continue  # the reversed topology is the topology: ReduceScatter's sweep is AllGather's
            halves[part] = _Sweep(topology, coll, max_chunks, time_limit, jobs, max_steps, notify, part)
            halves[part].run()
        ag_points = pareto_optimal(halves["allgather"].points)
        rs_points = (tuple(_reversed_dual(p, topology, rs) for p in ag_points) if symmetric
                     else pareto_optimal(halves["reducescatter"].points))
        composed = [point for first in rs_points for second in ag_points
                    if (point := _compose(first, second, base, max_chunks, ratio_lb)) is not None]
        kept = pareto_optimal(composed)
        for point in kept:
            notify("point", point)
        halves["direct"] = _Sweep(topology, base, max_chunks, time_limit, jobs, max_steps, notify, "direct",
                                  bounds=(steps_lb, ratio_lb), seed=kept)
        _, _, stopped = halves["direct"].run()
    except KeyboardInterrupt:
        found = kept + tuple(halves["direct"].points) if "direct" in halves else kept
        raise SweepInterrupted(ParetoResult(topology, base, steps_lb, ratio_lb, found, _all_tried(halves),
                                            INTERRUPTED, time.perf_counter() - start)) from None
    points = kept + tuple(halves["direct"].points)
    met = any(p.rounds_per_chunk <= ratio_lb for p in points)
    stop = BOUND_MET if met else MAX_CHUNKS if stopped == GAVE_UP else stopped
    return ParetoResult(topology, base, steps_lb, ratio_lb, points, _all_tried(halves), stop,
                        time.perf_counter() - start)


def _all_tried(halves: dict[str, _Sweep]) -> tuple[Attempt, ...]:
    return tuple(a for sweep in halves.values() for a in sweep.tried)


def _same_links(a: Topology, b: Topology) -> bool:
    def shape(t: Topology) -> tuple[list, list]:
        return (sorted((x.src, x.dst, x.bandwidth) for x in t.links),
                sorted((tuple(sorted(s.links)), s.bandwidth) for s in t.switches))
    return shape(a) == shape(b)


def _reversed_dual(point: ParetoPoint, topology: Topology, rs_unit: Collective) -> ParetoPoint:
    """An AllGather point on a topology equal to its reverse, read as the ReduceScatter point it is dual to."""
    assert point.algorithm is not None
    collective = split_chunks(rs_unit, point.chunks)
    schedule = tuple((step.rounds, tuple((s.chunk, s.src, s.dst) for s in step.sends))
                     for step in point.algorithm.steps)
    name = algorithm_name(collective, topology, point.chunks, point.steps, point.rounds)
    algorithm = schedule_to_algorithm(name, topology, collective, schedule, point.algorithm.provenance)
    return ParetoPoint(point.chunks, point.steps, point.rounds, point.status, algorithm, point.seconds)


def _compose(first: ParetoPoint, second: ParetoPoint, base: Collective, max_chunks: int,
             ratio_lb: Fraction) -> ParetoPoint | None:
    chunks = lcm(first.chunks, second.chunks)
    if chunks > max_chunks or first.algorithm is None or second.algorithm is None:
        return None
    rs_algo = scaled(first.algorithm, chunks // first.chunks)
    ag_algo = scaled(second.algorithm, chunks // second.chunks)
    collective = split_chunks(base, chunks)
    steps, rounds = rs_algo.num_steps + ag_algo.num_steps, rs_algo.rounds + ag_algo.rounds
    name = algorithm_name(collective, first.algorithm.topology, chunks, steps, rounds)
    provenance = {**solver_provenance(), "composition": "reducescatter+allgather",
                  "reducescatter": [first.chunks, first.steps, first.rounds],
                  "allgather": [second.chunks, second.steps, second.rounds]}
    algorithm = concatenate(name, rs_algo, ag_algo, collective, provenance)
    # fewer rounds were only ruled out for the composition, not for every AllReduce: optimal only at the bound
    status = OPTIMAL if Fraction(rounds, chunks) <= ratio_lb else FEASIBLE
    return ParetoPoint(chunks, steps, rounds, status, algorithm, first.seconds + second.seconds)
