"""Stage 3 of the MILP pipeline: exact times for fixed orders, and which inter-node transfers go together.

    stage = schedule_stage(SCHEDULE_MILP, reserve, solver, parameters, gap)
    run_stages((stage,), ScheduleWork(candidate, lower), clock, parameters, gap, reports)

When chunks were joined, the orders are rebuilt around the groups and the model solved again (a new
round, up to `schedule_rounds`). `lower` (a proven bound on every schedule) skips the stage when the
schedule is already within the gap of it, and floors the model's makespan so that the solver stops on
reaching it."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from collsynth.encodings.milp_ordering import Orders, ScheduleError, ScheduleProblem, Timing, evaluate
from collsynth.encodings.milp_schedule_model import build_schedule_model, joins_from_solution, schedule_start
from collsynth.encodings.taccl_milp import Routes
from collsynth.schedule.result import StageReport
from collsynth.synth.milp.errors import MilpSynthesisError
from collsynth.synth.milp.ordering import greedy_joins, relist_with_groups
from collsynth.synth.milp.parameters import MilpParameters
from collsynth.synth.milp.runner import Stage, StageBudget, StageOutcome


@dataclass(frozen=True)
class Candidate:
    """One ordered, timed schedule: its transfers, their orders and exact timing, and the routes it came from."""

    problem: ScheduleProblem
    orders: Orders
    timing: Timing
    routes: Routes | None = None


@dataclass
class ScheduleWork:
    """The schedule the scheduling stage improves in place, and the proven lower bound it may stop at."""

    best: Candidate
    lower: float | None
    solver: str
    gap: float
    parameters: MilpParameters

    @property
    def incumbent(self) -> float | None:
        return self.best.timing.makespan

    @property
    def in_hand(self) -> Candidate:
        return self.best


def schedule_round(work: ScheduleWork, budget: StageBudget) -> StageOutcome:
    """One solve of the scheduling model warm-started from greedy joins; then, if groups were chosen, the
    orders rebuilt around them (another round when that shortens the schedule)."""
    p, best = work.parameters, work.best
    tie = p.tie_us
    started = time.perf_counter()
    sm = build_schedule_model(best.problem, best.orders, best.timing.makespan)
    if work.lower is not None:
        # floor = bound x (1 - bound_floor_rel) - tie: valid for every schedule, lets the gap test close on it
        sm.model.set_bounds(sm.makespan_col, max(0.0, work.lower * (1 - p.bound_floor_rel) - tie),
                            sm.model.column_bounds(sm.makespan_col)[1])
    joined, joined_timing = greedy_joins(best.problem, replace(best.orders, joins=frozenset()), stop=budget.cut)
    warm = schedule_start(best.problem, sm, joined, joined_timing)
    if joined_timing.makespan > best.timing.makespan or sm.model.violation(warm) > p.warm_violation:
        warm = schedule_start(best.problem, sm, best.orders, best.timing)
    result = sm.model.solve(work.solver, time_limit=budget.solver_limit(), gap=work.gap, warm_start=warm)
    kind = "MILP" if sm.join_col else "LP"
    note = f"{kind}; {len(sm.join_col)} join candidates"
    improved = False
    if joined_timing.makespan < best.timing.makespan - tie:
        best, improved = Candidate(best.problem, joined, joined_timing, best.routes), True
    if result.has_solution and result.values is not None:
        orders = replace(best.orders, joins=joins_from_solution(sm, result.values))
        timing = evaluate(best.problem, orders)
        assert result.objective is not None
        if timing.makespan > result.objective + p.objective_check_rel * max(1.0, timing.makespan):
            raise MilpSynthesisError(f"internal check failed: the {kind} says {result.objective:.6f} us but the "
                                     f"schedule takes {timing.makespan:.6f} us")
        if timing.makespan < best.timing.makespan - tie or (not improved and timing.makespan <=
                                                             best.timing.makespan + tie):
            best = Candidate(best.problem, orders, timing, best.routes)
        note += f", {len(best.orders.joins)} joined"
    report = StageReport(budget.name, time.perf_counter() - started, result.status, result.objective,
                         status=result.status,
                         bound=result.bound, gap=result.gap, solver=work.solver, size=sm.model.size(), note=note)
    work.best = best
    return StageOutcome((report,), again=_relist(work))


def _relist(work: ScheduleWork) -> bool:
    """Reorder what follows each group, knowing when the group arrives; True when that shortened the schedule."""
    best = work.best
    if not best.orders.joins:
        return False
    try:
        orders, timing = relist_with_groups(best.problem, best.orders)
    except ScheduleError:
        return False
    if timing.makespan >= best.timing.makespan - work.parameters.tie_us:
        return False
    work.best = Candidate(best.problem, orders, timing, best.routes)
    return True


def schedule_stage(name: str, reserve: float, solver: str, parameters: MilpParameters) -> Stage[ScheduleWork]:
    """The scheduling stage under `name`, leaving `reserve` x the budget to what follows it."""
    return Stage(name, schedule_round, reserve=reserve, skip_at_bound=True, skip_when_spent=True,
                 rounds=parameters.schedule_rounds, solver=solver)
