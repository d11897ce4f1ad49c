"""Stages 1 and 2 of the MILP pipeline for one non-combining collective, as data: routings (greedy and
the routing MILP), orderings, local search and inter-node groups, each a `Stage` run by `run_stages`.

    best, lower = route_and_order(inst, solver, clock, parameters, gap, reports)

Every stage reads and extends one `RouteWork` (the candidate schedules, the routing model and its
answer, the best proven lower bound); `routing_stages` lists them with their budget reserves."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from collsynth.encodings.milp_bounds import best_sketch_bound
from collsynth.encodings.milp_instance import RoutingInstance
from collsynth.encodings.milp_model import SolveResult
from collsynth.encodings.taccl_milp import (
    RoutingModel,
    build_routing_model,
    distinct_links,
    min_links_lower_bound,
    routes_from_solution,
    routing_start,
    set_connections_objective,
    set_makespan_objective,
    transfers_from_routes,
)
from collsynth.schedule.result import ModelSize, StageReport
from collsynth.synth.milp.errors import MilpSynthesisError
from collsynth.synth.milp.ordering import RULES, best_list_schedule, greedy_joins, pattern_joins
from collsynth.synth.milp.parameters import (
    GREEDY_ROUTING,
    GROUP_PATTERNS,
    GROUP_SPREAD,
    LOCAL_SEARCH,
    ORDERING,
    ROUTING_LINKS_MILP,
    ROUTING_MILP,
    SKETCH_BOUNDS,
    MilpParameters,
)
from collsynth.synth.milp.routing import heuristic_routes, improve_routes, ring_links
from collsynth.synth.milp.runner import Clock, Stage, StageBudget, StageOutcome, run_stages
from collsynth.synth.milp.schedule_stage import Candidate
from collsynth.synth.milp.spread import respread_groups


@dataclass
class RouteWork:
    """The state the routing stages share within one run (never beyond it)."""

    inst: RoutingInstance
    solver: str
    gap: float
    parameters: MilpParameters
    clock: Clock
    rm: RoutingModel | None = None
    build_seconds: float = 0.0
    candidates: list[Candidate] = field(default_factory=list)
    rules_of: list[str] = field(default_factory=list)  # the ordering rule that served each candidate best
    starts: list[np.ndarray] = field(default_factory=list)  # symmetric greedy routings as MILP starts
    lower: float | None = None
    routing: SolveResult | None = None
    best: Candidate | None = None

    @property
    def incumbent(self) -> float | None:
        if self.best is not None:
            return self.best.timing.makespan
        return min((c.timing.makespan for c in self.candidates), default=None)

    @property
    def in_hand(self) -> Candidate | None:
        return self.best or min(self.candidates, key=lambda c: c.timing.makespan, default=None)

    @property
    def multi_node(self) -> bool:
        return bool(self.inst.groupable) or self.inst.sketch.num_nodes > 1

    @property
    def routed(self) -> bool:
        """The routing MILP returned a routing."""
        return self.routing is not None and self.routing.has_solution

    def model(self) -> RoutingModel:
        assert self.rm is not None, "the greedy stage builds the routing model"
        return self.rm

    def add(self, candidate: Candidate, rule: str) -> None:
        self.candidates.append(candidate)
        self.rules_of.append(rule)


def greedy_routing(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """Greedy routings: shortest-time and congestion-aware trees, fan-out trees and (for switches that want
    few connections) trees on a ring; each is list-scheduled, and the symmetric ones warm-start the MILP.
    The first routing under the first ordering rule always runs (the pipeline needs a schedule); the stage's
    clock is asked before every other routing and rule."""
    inst = work.inst
    started = time.perf_counter()
    work.rm = build_routing_model(inst)
    work.build_seconds = time.perf_counter() - started
    started = time.perf_counter()
    plans = [partial(heuristic_routes, inst, congestion=congestion, min_hops=hops)
             for congestion in (False, True) for hops in (False, True)]
    plans.append(partial(heuristic_routes, inst, fanout=True))
    if inst.unique_policy == "min":
        plans.append(partial(heuristic_routes, inst, ring_links(inst)))
    done = 0
    for plan in plans:
        if done and budget.cut():
            break
        routes, symmetric = plan()
        problem = transfers_from_routes(inst, routes)
        orders, timing, rule = best_list_schedule(problem, RULES, stop=budget.cut)
        work.add(Candidate(problem, orders, timing, routes), rule)
        if symmetric:
            work.starts.append(routing_start(inst, work.rm, routes))
        done += 1
    cut = budget.cut()
    return StageOutcome((StageReport(budget.name, time.perf_counter() - started, _status(cut), work.incumbent,
                                     status=_status(cut), budget_cut=cut,
                                     note=f"{done} of {len(plans)} greedy routings" + _cut_note(cut)),))


def sketch_bounds(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """What the routing MILP cannot see: NIC order, and the spread of the chunks that cross it last (the
    families of the nodes reached before the stage's deadline)."""
    started = time.perf_counter()
    extra = best_sketch_bound(work.inst, stop=budget.cut)
    if extra is None:
        return StageOutcome()
    work.lower = extra.value
    return StageOutcome((StageReport(budget.name, time.perf_counter() - started, "bound", status="bound",
                                     bound=extra.value, budget_cut=budget.cut(), note=str(extra)),))


def routing_milp(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """The routing MILP, warm-started from the best symmetric greedy routing, whose makespan caps it."""
    rm, p = work.model(), work.parameters
    warm = min(work.starts, key=lambda x: x[rm.makespan_col]) if work.starts else None
    if warm is not None:
        # cap = warm makespan x (1 + warm_cap_rel) + tie: the start stays feasible under rounding
        rm.model.set_bounds(rm.makespan_col, 0.0, float(warm[rm.makespan_col]) * (1 + p.warm_cap_rel) + p.tie_us)
    set_makespan_objective(rm)
    note = f"built in {work.build_seconds:.2f} s; symmetry order {work.inst.symmetry.order}"
    result = rm.model.solve(work.solver, time_limit=budget.solver_limit(), gap=work.gap, warm_start=warm)
    if result.bound is not None:
        work.lower = result.bound if work.lower is None else max(work.lower, result.bound)
    if warm is None:
        note += "; no warm start (greedy routes not symmetric)"
    if result.status in ("infeasible", "unbounded", "error"):
        raise MilpSynthesisError(f"routing MILP is {result.status} ({result.message}); the sketch may make the "
                                 "collective impossible")
    work.routing = result
    return StageOutcome((_solver_report(budget.name, result, work.build_seconds, note, rm.model.size()),))


def routing_links_milp(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """Second objective: fewest / most distinct switch links without giving up any makespan."""
    rm, p, inst = work.model(), work.parameters, work.inst
    assert work.routing is not None and work.routing.values is not None and inst.unique_policy is not None
    policy = inst.unique_policy
    makespan = float(work.routing.values[rm.makespan_col]) * (1 + p.keep_makespan_rel) + p.tie_us
    set_connections_objective(rm, policy, makespan)
    fits = [x for x in [*work.starts, work.routing.values] if x[rm.makespan_col] <= makespan]
    warm = min(fits, key=rm.model.objective_value)
    if policy == "min" and distinct_links(rm, warm) == min_links_lower_bound(inst):
        # a start already meets the fewest links any routing needs: nothing to search
        work.routing = replace(work.routing, values=warm)
        count = distinct_links(rm, warm)
        return StageOutcome((StageReport(budget.name, 0.0, "optimal", count, status="optimal", bound=count, gap=0.0,
                                         solver=work.solver, unit="links",
                                         note=f"{policy}: {count} distinct switch links = one into each receiving "
                                              "rank"),))
    second = rm.model.solve(work.solver, time_limit=budget.solver_limit(), gap=work.gap, warm_start=warm)
    if second.has_solution:
        work.routing = second
    assert work.routing.values is not None
    note = f"{policy}: {distinct_links(rm, work.routing.values)} distinct switch links"
    return StageOutcome((replace(_solver_report(budget.name, second, 0.0, note, None), unit="links"),))


def ordering(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """List scheduling of the MILP's routing under every ordering rule, the best kept."""
    assert work.routing is not None and work.routing.values is not None
    started = time.perf_counter()
    routes = routes_from_solution(work.inst, work.model(), work.routing.values)
    problem = transfers_from_routes(work.inst, routes)
    orders, timing, rule = best_list_schedule(problem, RULES, stop=budget.cut)
    work.add(Candidate(problem, orders, timing, routes), rule)
    cut = budget.cut()
    return StageOutcome((StageReport(budget.name, time.perf_counter() - started, _status(cut), timing.makespan,
                                     status=_status(cut), budget_cut=cut,
                                     note=f"rule {rule}; {len(problem.transfers)} transfers" + _cut_note(cut)),))


def local_search(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """Route local search from the best greedy routing and from the MILP's routing."""
    started = time.perf_counter()
    cands = work.candidates
    size = len(cands[-1].problem.transfers)
    tries = work.parameters.search_tries(size)
    best_index = min(range(len(cands)), key=lambda i: cands[i].timing.makespan)
    rules = RULES if size <= work.parameters.small_transfers else (work.rules_of[best_index],)
    greedy_count = len(cands) - (1 if work.routed else 0)
    picks = {min(range(greedy_count), key=lambda i: cands[i].timing.makespan), len(cands) - 1}
    searched, moves, stopped = [], 0, False
    for i in sorted(picks):
        routes = cands[i].routes
        if tries and routes is not None:
            found = improve_routes(work.inst, routes, max_tries=tries, rules=rules, stop=budget.cut)
            moves += found.moves
            stopped = stopped or found.stopped
            searched.append(Candidate(found.problem, found.orders, found.timing, found.routes))
    work.candidates.extend(searched)
    if not searched:
        return StageOutcome()
    note = f"{moves} moves kept, up to {tries} schedules tried per start" + _cut_note(stopped)
    return StageOutcome((StageReport(budget.name, time.perf_counter() - started, _status(stopped), work.incumbent,
                                     status=_status(stopped), budget_cut=stopped, note=note),))


def group_patterns(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """Inter-node chunks sent together can change which candidate is best: compare after greedy joins and
    join patterns (makespan first; for switches that ask for few/many connections, then fewer/more links)."""
    inst, p = work.inst, work.parameters
    sign = {"min": 1, "max": -1}.get(inst.unique_policy or "", 0)
    started = time.perf_counter()
    # a schedule already at the lower bound: other groupings could only tie with it
    at_bound = p.within_gap(work.incumbent, work.lower, work.gap)
    joined: list[tuple[float, int, float, int, Candidate]] = []
    for cand in work.candidates:
        # the deadline is checked between joins; past it, the rest compete with the joins made so far
        if budget.cut():
            orders, timing = cand.orders, cand.timing
        else:
            orders, timing = greedy_joins(cand.problem, cand.orders, stop=budget.cut)
        if not at_bound and not budget.cut():
            patterned, pattern_timing = pattern_joins(cand.problem, cand.orders, stop=budget.cut)
            if pattern_timing.makespan < timing.makespan - p.tie_us:
                orders, timing = patterned, pattern_timing
                cand = Candidate(cand.problem, orders, timing, cand.routes)
        distinct = len({tr.arc for tr in cand.problem.transfers} & inst.unique_links)
        joined.append((round(timing.makespan, 9), sign * distinct, cand.timing.makespan, len(joined), cand))
    work.best = min(joined)[-1]
    if not inst.groupable:
        return StageOutcome()
    cut = budget.cut()
    note = (f"inter-node groups for {len(work.candidates)} candidate schedules"
            + ("; patterns skipped: a schedule is at the lower bound" if at_bound else "") + _cut_note(cut))
    return StageOutcome((StageReport(budget.name, time.perf_counter() - started, _status(cut), work.incumbent,
                                     status=_status(cut), budget_cut=cut, note=note),))


def group_spread(work: RouteWork, budget: StageBudget) -> StageOutcome:
    """The last inter-node groups re-routed exactly inside their receiving nodes, per group cut."""
    best = work.best
    assert best is not None and best.routes is not None
    started = time.perf_counter()
    total = work.clock.total
    found = respread_groups(work.inst, best.routes, best.problem, best.orders, solver=work.solver, lower=work.lower,
                            stop=budget.cut, seconds_left=budget.seconds_left,
                            solve_seconds=None if total is None else work.parameters.spread_solve_share * total)
    if found is not None:
        work.best = Candidate(found.problem, found.orders, found.timing, found.routes)
    cut = budget.cut()
    note = ("improved" if found is not None else "no better cut found") + (
        "" if found is None else f"; {found.tried} cuts tried, {found.solves} spread MILPs solved") + _cut_note(cut)
    return StageOutcome((StageReport(budget.name, time.perf_counter() - started, _status(cut), work.incumbent,
                                     status=_status(cut), solver=work.solver, budget_cut=cut, note=note),))


def _status(cut: bool) -> str:
    return "stopped" if cut else "heuristic"


def _cut_note(cut: bool) -> str:
    return "; stopped at its share of the budget" if cut else ""


def _solver_report(name: str, result: SolveResult, extra_seconds: float, note: str,
                   size: ModelSize | None) -> StageReport:
    return StageReport(name, result.seconds + extra_seconds, result.status, result.objective, status=result.status,
                       bound=result.bound, gap=result.gap, solver=result.solver, size=size, note=note)


def _has_links_objective(work: RouteWork) -> bool:
    return work.routed and work.inst.unique_policy is not None


def _spreadable(work: RouteWork) -> bool:
    return bool(work.inst.groupable) and work.best is not None and work.best.routes is not None


def routing_stages(p: MilpParameters, multi_node: bool, solver: str) -> tuple[Stage[RouteWork], ...]:
    """The stages in order, with the share of the budget each leaves to those after it."""
    routing_reserve = p.reserve_after_routing if multi_node else p.reserve_after_routing_one_node
    last = p.reserve_after_schedule
    return (
        Stage(GREEDY_ROUTING, greedy_routing, reserve=routing_reserve),
        Stage(SKETCH_BOUNDS, sketch_bounds, reserve=routing_reserve),
        # runs even on a spent budget (with min_stage_seconds) so that the result has a proven bound
        Stage(ROUTING_MILP, routing_milp, reserve=routing_reserve, skip_at_bound=True, solver=solver),
        Stage(ROUTING_LINKS_MILP, routing_links_milp, reserve=routing_reserve, applies=_has_links_objective,
              solver=solver),
        Stage(ORDERING, ordering, reserve=routing_reserve, applies=lambda w: w.routed),
        Stage(LOCAL_SEARCH, local_search, reserve=p.reserve_after_search if multi_node else last,
              skip_at_bound=True),
        Stage(GROUP_PATTERNS, group_patterns, reserve=p.reserve_after_patterns if multi_node else last),
        Stage(GROUP_SPREAD, group_spread, reserve=p.reserve_after_spread, skip_at_bound=True, applies=_spreadable,
              solver=solver),
    )


def route_and_order(inst: RoutingInstance, solver: str, clock: Clock, parameters: MilpParameters, gap: float,
                    reports: list[StageReport]) -> tuple[Candidate, float | None]:
    """Stages 1 and 2 for one non-combining collective: the best ordered schedule and the proven lower bound."""
    work = RouteWork(inst, solver, gap, parameters, clock)
    multi_node = bool(inst.groupable) or inst.sketch.num_nodes > 1
    run_stages(routing_stages(parameters, multi_node, solver), work, clock, parameters, gap, reports)
    assert work.best is not None, "the group-patterns stage always picks a schedule"
    return work.best, work.lower
