"""MILP (TACCL-style) synthesis: sketch -> routing MILP -> ordering -> scheduling MILP -> Algorithm.

    synthesize_milp(topology, "allgather", sketch, size_bytes, solver="highs", time_limit=60)

1. the routing MILP chooses each chunk's links (warm-started from a greedy shortest-time routing, whose
   routing objective also caps the makespan column); its optimum, or its proven bound when a time limit
   stops it, is a lower bound on every schedule the sketch allows; on several nodes the combinatorial
   bounds of `encodings/milp_bounds.py` (NIC drain order, late spreading) may raise it;
2. greedy list scheduling orders the chunks on each link and switch port (several priority rules are
   tried, the best kept); the greedy routing is scheduled too, and the better of the two routings wins;
3. the scheduling MILP (an LP without inter-node links) computes exact times and which inter-node
   chunks travel together.
The stages are data (`route_stages.routing_stages`, `schedule_stage.schedule_stage`) run by one runner
(`runner.run_stages`) that owns the clock, the skip rules and the reports; every constant is a field of
`MilpParameters`. `time_limit` is the wall-clock budget of the whole run: each MILP stage gets what is
left, less a reserve for the stages after it (and, for CBC, the grace in which its process is stopped);
every heuristic stage asks the stage's clock between its steps (routings, ordering rules, moves, joins,
cuts) and stops at its share, keeping the schedules it has (the first routing always runs). When the
budget runs out the best verified schedule is returned with its proven gap, and the result says it was
time-limited.
`size_bytes` is TACCL's per-chunk-before-chunkup size: each rank's AllGather input, the AllToAll block
per pair of ranks, 1/n of an AllReduce buffer; a chunk is `size_bytes / chunkup`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from collsynth.collectives import Collective
from collsynth.collectives.spec import canonical_name, make_collective
from collsynth.core.enums import Status
from collsynth.core.signals import release_frames
from collsynth.encodings.milp_instance import RoutingInstance, build_instance
from collsynth.encodings.milp_model import SOLVERS, SolverError, stop_grace
from collsynth.encodings.milp_ordering import evaluate
from collsynth.encodings.sketch import Sketch
from collsynth.schedule.result import StageReport
from collsynth.schedule.verify import verify
from collsynth.synth.milp.combine import concatenate, reversed_candidate, to_algorithm
from collsynth.synth.milp.errors import MilpSynthesisError
from collsynth.synth.milp.parameters import (
    ALLGATHER_SCHEDULE_MILP,
    ALLREDUCE_SCHEDULE_MILP,
    DEFAULT_PARAMETERS,
    DUAL_SCHEDULE_MILP,
    REDUCE_SCHEDULE_MILP,
    SCHEDULE_MILP,
    VERIFY,
    MilpParameters,
)
from collsynth.synth.milp.result import MilpInterrupted, MilpResult
from collsynth.synth.milp.route_stages import route_and_order
from collsynth.synth.milp.runner import Clock, StagesInterrupted, run_stages
from collsynth.synth.milp.schedule_stage import Candidate, ScheduleWork, schedule_stage
from collsynth.topologies import Topology


@dataclass
class _InHand:
    """The best finished schedule of the collective asked for, and the proven bound with it: what an interrupt
    between two stages keeps (one within a stage keeps that stage's best, `StagesInterrupted.best`)."""

    best: Candidate | None = None
    lower: float | None = None

    def keep(self, best: Candidate, lower: float | None) -> Candidate:
        self.best, self.lower = best, lower
        return best


@dataclass(frozen=True)
class _Run:
    """One run's fixed inputs: what every part of the pipeline reads (and the schedule in hand it updates)."""

    topology: Topology
    target: Collective
    sketch: Sketch
    chunk_bytes: float
    solver: str
    gap: float
    clock: Clock
    parameters: MilpParameters
    in_hand: _InHand

    def schedule(self, candidate: Candidate, name: str, reports: list[StageReport], *, lower: float | None = None,
                 reserve: float | None = None) -> Candidate:
        """Run the scheduling stage `name` on `candidate` (reserve: what it leaves to later stages)."""
        p = self.parameters
        stage = schedule_stage(name, p.reserve_after_schedule if reserve is None else reserve, self.solver, p)
        work = ScheduleWork(candidate, lower, self.solver, self.gap, p)
        run_stages((stage,), work, self.clock, p, self.gap, reports)
        return work.best


def _non_combining(run: _Run, reports: list[StageReport]) -> tuple[Candidate, float | None]:
    inst = build_instance(run.topology, run.target, run.sketch, run.chunk_bytes)
    best, lower = route_and_order(inst, run.solver, run.clock, run.parameters, run.gap, reports)
    run.in_hand.keep(best, lower)
    return run.in_hand.keep(run.schedule(best, SCHEDULE_MILP, reports, lower=lower), lower), lower


def _forward_and_reversed(run: _Run, forward_collective: Collective, stage: str, reports: list[StageReport],
                          ) -> tuple[RoutingInstance, Candidate, Candidate]:
    """Route and schedule a non-combining collective, then its reversal (a reduction), mirrored in time."""
    inst = build_instance(run.topology, forward_collective, run.sketch, run.chunk_bytes)
    try:
        best, lower = route_and_order(inst, run.solver, run.clock, run.parameters, run.gap, reports)
        forward = run.schedule(best, stage, reports, lower=lower,
                               reserve=run.parameters.reserve_after_forward_schedule)
    except StagesInterrupted as stop:
        raise StagesInterrupted(None, None) from stop  # a schedule of the dual, not of the collective asked for
    return inst, forward, reversed_candidate(forward, inst.topology)


def _reduction(run: _Run, reports: list[StageReport]) -> tuple[Candidate, float | None]:
    """ReduceScatter / Reduce: the non-combining dual's schedule, reversed and re-timed (no proven bound: the
    routing bound holds for the dual)."""
    _, _, mirrored = _forward_and_reversed(run, run.target.non_combining_dual(), DUAL_SCHEDULE_MILP, reports)
    run.in_hand.keep(mirrored, None)
    return run.in_hand.keep(run.schedule(mirrored, REDUCE_SCHEDULE_MILP, reports), None), None


def _allreduce(run: _Run, reports: list[StageReport]) -> tuple[Candidate, float | None]:
    """AllReduce: the AllGather's reversal (a ReduceScatter) then the AllGather, merged and re-timed (no proven
    bound: the routing bound holds for the AllGather half only)."""
    gather = make_collective("allgather", run.topology.num_ranks, run.sketch.chunkup)
    inst, forward, reduce = _forward_and_reversed(run, gather, ALLGATHER_SCHEDULE_MILP, reports)
    owners = {c: inst.chunks[c].sources[0] for c in range(len(inst.chunks))}
    problem, orders = concatenate(reduce, forward, owners)
    merged = Candidate(problem, orders, evaluate(problem, orders))
    run.in_hand.keep(merged, None)
    return run.in_hand.keep(run.schedule(merged, ALLREDUCE_SCHEDULE_MILP, reports), None), None


def _target(topology: Topology, collective: str | Collective, sketch: Sketch, size_bytes: int, solver: str,
            time_limit: float | None, root: int | None) -> Collective:
    """The collective asked for, after checking the request (one clear error per bad input)."""
    if solver not in SOLVERS:
        raise SolverError(f"unknown solver {solver!r}; use cbc or highs")
    if size_bytes <= 0:
        raise MilpSynthesisError(f"size must be > 0 bytes, got {size_bytes}")
    if time_limit is not None and time_limit <= 0:
        raise MilpSynthesisError(f"time limit must be > 0 seconds, got {time_limit}")
    if isinstance(collective, Collective):
        if collective.chunks != sketch.chunkup:
            raise MilpSynthesisError(f"the collective has chunk factor {collective.chunks} but the sketch's chunkup "
                                     f"is {sketch.chunkup}; make them equal")
        return collective
    return make_collective(canonical_name(collective), topology.num_ranks, sketch.chunkup, root=root)


def synthesize_milp(topology: Topology, collective: str | Collective, sketch: Sketch, size_bytes: int, *,
                    solver: str = "cbc", time_limit: float | None = None, gap: float = 1e-4,
                    root: int | None = None, parameters: MilpParameters = DEFAULT_PARAMETERS,
                    now: Callable[[], float] = time.perf_counter) -> MilpResult:
    """Synthesize a schedule for `collective` on `topology` within `sketch` (module docstring).

    `time_limit` is the wall-clock budget of the whole run, in seconds (None: no limit): MILP stages
    share what is left, a stopped stage keeps its best answer, and the result reports the proven gap
    and whether the budget cut a stage short (`MilpResult.time_limited`). Without a binding limit the
    result is deterministic. `gap` is the relative MIP gap at which a MILP stage stops and within which a
    schedule counts as optimal against the proven bound. `now` is the clock the budget is read on (tests
    give a fake one)."""
    target = _target(topology, collective, sketch, size_bytes, solver, time_limit, root)
    clock = Clock(now(), time_limit, stop_grace(solver), parameters.min_stage_seconds, now)
    run = _Run(topology, target, sketch, size_bytes / sketch.chunkup, solver, gap, clock, parameters, _InHand())
    reports: list[StageReport] = []
    try:
        final, lower = _final(run, reports)
        return _result(run, final, lower, size_bytes, time_limit, [*reports])
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the best schedule in hand, verified, is kept
        release_frames(stop)  # the cut-short solver frames go now, not with whoever keeps what is raised
        best, lower = run.in_hand.best, run.in_hand.lower
        if isinstance(stop, StagesInterrupted) and stop.best is not None:  # the stage's best: at least as good
            best, lower = stop.best, stop.lower
        if best is None:
            raise
        reports.append(StageReport("interrupted", 0.0, "the best schedule so far is kept", status="interrupted"))
        raise MilpInterrupted(_result(run, best, lower, size_bytes, time_limit, reports, interrupted=True)) from stop


def _final(run: _Run, reports: list[StageReport]) -> tuple[Candidate, float | None]:
    """The pipeline of the target's kind: the final candidate and the proven lower bound."""
    target = run.target
    if not target.combining:
        return _non_combining(run, reports)
    if target.name in ("reducescatter", "reduce"):
        return _reduction(run, reports)
    if target.name == "allreduce":
        return _allreduce(run, reports)
    raise MilpSynthesisError(f"MILP synthesis does not handle {target.name} (combining, no non-combining dual); "
                             "use AllReduce, ReduceScatter, Reduce or a non-combining collective")


def _result(run: _Run, final: Candidate, lower: float | None, size_bytes: int, time_limit: float | None,
            reports: list[StageReport], interrupted: bool = False) -> MilpResult:
    """The verified algorithm of `final`, with its provenance, status and the stage reports."""
    p, timing = run.parameters, final.timing
    if lower is not None and lower > timing.makespan:
        # the routing bound holds for every schedule in the sketch; beyond solver tolerance this is a bug
        if lower > timing.makespan * (1 + p.bound_check_rel) + p.tie_us:
            raise MilpSynthesisError(f"internal check failed: lower bound {lower:.6f} us exceeds the schedule's "
                                     f"{timing.makespan:.6f} us")
        lower = timing.makespan
    limited = not interrupted and time_limit is not None and any(
        s.budget_cut or s.status in ("feasible", "no_solution", "stopped") for s in reports)
    sketch = run.sketch
    provenance: dict[str, Any] = {
        "synthesizer": "milp", "solver": run.solver, "sketch": sketch.name or str(sketch), "size_bytes": size_bytes,
        "chunk_bytes": run.chunk_bytes, "predicted_us": round(timing.makespan, 6),
        "lower_bound_us": None if lower is None else round(lower, 6), "time_limit_s": time_limit,
        "time_limited": limited, **({"interrupted": True} if interrupted else {}),
    }
    name = f"milp_{run.target.name}_{run.topology.name}_{sketch.name or 'sketch'}".replace(":", "_").replace("/", "_")
    algorithm = to_algorithm(name, run.topology, run.target, final.problem, timing, provenance)
    started = time.perf_counter()
    verify(algorithm)
    reports.append(StageReport(VERIFY, time.perf_counter() - started, "ok", status="ok"))
    # one wall-clock figure for the whole run (verification included), in the result and its provenance
    total = run.clock.elapsed()
    provenance.update({"seconds": round(total, 3), "stages": [s.to_dict() for s in reports]})
    algorithm = replace(algorithm, provenance=provenance)
    gap = None if lower is None or timing.makespan <= 0 else max(0.0, (timing.makespan - lower) / timing.makespan)
    status = Status.INTERRUPTED if interrupted else Status.TIMEOUT if limited else \
        Status.OPTIMAL if gap is not None and gap <= run.gap else Status.SAT
    return MilpResult(status, (algorithm,), bound=lower, bound_kind="time_us", synthesizer="milp", seconds=total,
                      provenance={**provenance, "predicted_us": timing.makespan, "lower_bound_us": lower,
                                  "sketch_text": str(sketch)},
                      stages=tuple(reports))
