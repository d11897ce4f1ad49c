"""MILP (TACCL-style) synthesis pipeline: sketch -> routing MILP -> ordering -> scheduling MILP -> Algorithm.

    synthesize_milp(topology, "allgather", sketch, size_bytes, solver="highs", time_limit=60)

1. the routing MILP chooses each chunk's links (warm-started from a greedy shortest-time routing, whose
   routing objective also caps the makespan column); its optimum, or its proven bound when a time limit
   stops it, is a lower bound on every schedule the sketch allows; on several nodes the combinatorial
   bounds of `encodings/milp_bounds.py` (NIC drain order, late spreading) may raise it;
2. greedy list scheduling orders the chunks on each link and switch port (several priority rules are
   tried, the best kept); the greedy routing is scheduled too, and the better of the two routings wins;
3. the scheduling MILP (an LP without inter-node links) computes exact times and which inter-node
   chunks travel together.
`time_limit` is the wall-clock budget of the whole run: each MILP stage gets what is left, less a
reserve for the stages after it (and, for CBC, the grace in which its process is stopped); the local
searches stop at their share of it. A MILP stage is skipped when the schedule it would start from is
already within `gap` of the best proven lower bound, and the scheduling MILP is told that bound, so it
stops as soon as it reaches it. When the budget runs out the best verified schedule is returned with
its proven gap, and the result says it was time-limited.
ReduceScatter and Reduce are the reverse of an AllGather / Broadcast schedule (each send reversed
into a reduction, mirrored in time); AllReduce is that ReduceScatter followed by the AllGather, merged
and re-timed. `size_bytes` is TACCL's per-chunk-before-chunkup size: each rank's AllGather input, the
AllToAll block per pair of ranks, 1/n of an AllReduce buffer; a chunk is `size_bytes / chunkup`.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from collsynth.collectives import Collective
from collsynth.collectives.spec import canonical_name, make_collective
from collsynth.core.errors import CollsynthError
from collsynth.core.files import write_atomic
from collsynth.encodings.milp_bounds import best_sketch_bound
from collsynth.encodings.milp_instance import RoutingInstance, build_instance
from collsynth.encodings.milp_model import CBC_KILL_GRACE, CBC_STOP_GRACE, SOLVERS, ModelSize, SolverError, SolveResult
from collsynth.encodings.milp_ordering import (
    REDUCE,
    RULES,
    Orders,
    ScheduleError,
    ScheduleProblem,
    Timing,
    Transfer,
    best_list_schedule,
    evaluate,
    greedy_joins,
    orders_from_times,
    pattern_joins,
    relist_with_groups,
)
from collsynth.encodings.milp_search import improve_routes
from collsynth.encodings.milp_spread import respread_groups
from collsynth.encodings.sketch import Sketch
from collsynth.encodings.taccl_milp import (
    Routes,
    build_routing_model,
    build_schedule_model,
    distinct_links,
    heuristic_routes,
    joins_from_solution,
    min_links_lower_bound,
    ring_links,
    routes_from_solution,
    routing_start,
    schedule_start,
    set_connections_objective,
    set_makespan_objective,
    transfers_from_routes,
)
from collsynth.schedule.algorithm import Algorithm, Send, Step
from collsynth.schedule.verify import verify
from collsynth.topologies import Topology

MB = 1 << 20
_DUALS = {"reducescatter": "allgather", "reduce": "broadcast"}
# the shortest solver time limit a MILP stage gets: the routing MILP gets it even when the budget is spent
# (so it still reports a bound); a later MILP stage that cannot have it is skipped. Shares of the whole
# budget kept for what follows a stage:
MIN_STAGE_SECONDS = 0.5
RESERVE_AFTER_ROUTING = 0.35  # ordering, local search, group patterns and the scheduling MILP
RESERVE_AFTER_ROUTING_ONE_NODE = 0.1  # the scheduling stage is an LP there
RESERVE_AFTER_SEARCH = 0.25  # group patterns, group spread and the scheduling MILP
RESERVE_AFTER_PATTERNS = 0.1875  # group spread and the scheduling MILP
RESERVE_AFTER_SPREAD = 0.125  # the scheduling MILP
RESERVE_AFTER_SCHEDULE = 0.03  # building and verifying the algorithm
BUDGET_SPENT = "skipped (budget spent)"
SPREAD_SOLVE_SHARE = 0.4  # the most one spread MILP of the group-spread stage may take


class MilpSynthesisError(CollsynthError):
    """A MILP synthesis request that cannot be served (the message says why and what to change)."""


@dataclass(frozen=True)
class StageReport:
    name: str
    seconds: float
    status: str
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    solver: str = ""
    size: ModelSize | None = None
    note: str = ""
    unit: str = "us"
    # the budget cut this stage short or skipped it
    budget_cut: bool = False

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.name, "seconds": round(self.seconds, 4), "status": self.status,
                                "solver": self.solver, "objective": self.objective, "bound": self.bound,
                                "unit": self.unit, "gap": self.gap, "note": self.note,
                                "budget_cut": self.budget_cut}
        if self.size is not None:
            data["model"] = {"columns": self.size.columns, "integer_columns": self.size.integer_columns,
                             "rows": self.size.rows, "nonzeros": self.size.nonzeros,
                             "families": dict(self.size.families)}
        return data

    def __str__(self) -> str:
        parts = [f"{self.name:<24} {self.status:<11} {self.seconds:8.2f} s"]
        if self.objective is not None:
            parts.append(f"obj {self.objective:.3f} {self.unit}")
        if self.bound is not None:
            parts.append(f"bound {self.bound:.3f} {self.unit}")
        if self.gap is not None:
            parts.append(f"gap {100 * self.gap:.2f}%")
        if self.size is not None:
            parts.append(f"[{self.size}]")
        if self.note:
            parts.append(f"({self.note})")
        return "  ".join(parts)


@dataclass(frozen=True)
class MilpResult:
    algorithm: Algorithm
    predicted_us: float
    lower_bound_us: float | None
    stages: tuple[StageReport, ...]
    size_bytes: int
    chunk_bytes: float
    solver: str
    sketch: Sketch
    time_limit: float | None = None
    # the budget cut a stage short (a MILP stopped with an incumbent, or a search stopped early)
    time_limited: bool = False
    seconds: float = 0.0

    @property
    def gap(self) -> float | None:
        """(predicted - lower bound) / predicted: how far the schedule may be from the best in the sketch."""
        if self.lower_bound_us is None or self.predicted_us <= 0:
            return None
        return max(0.0, (self.predicted_us - self.lower_bound_us) / self.predicted_us)

    def summary(self) -> str:
        lines = [f"{self.algorithm.name}: {self.algorithm.collective} on {self.algorithm.topology.name}, "
                 f"{self.size_bytes} B per chunk before chunkup ({self.chunk_bytes:g} B per chunk), solver "
                 f"{self.solver}", f"sketch: {self.sketch}"]
        lines += ["  " + str(stage) for stage in self.stages]
        lb = f"{self.lower_bound_us:.3f} us" if self.lower_bound_us is not None else \
            "unknown (combining collectives: the routing stage bounds their AllGather/Broadcast half only)"
        gap = f"{100 * self.gap:.2f}%" if self.gap is not None else "unknown"
        lines.append(f"predicted time {self.predicted_us:.3f} us; lower bound {lb}; gap {gap}")
        if self.time_limit is not None:
            state = "time-limited: the budget cut a stage short" if self.time_limited else "no stage was cut short"
            lines.append(f"budget {self.time_limit:g} s for the whole run, {self.seconds:.2f} s used; {state}")
        return "\n".join(lines)


@dataclass(frozen=True)
class _Clock:
    """The wall-clock budget of one run: `total` seconds from `started` (time.perf_counter), or none."""
    started: float
    total: float | None
    solver: str

    def left(self) -> float | None:
        return None if self.total is None else self.total - (time.perf_counter() - self.started)

    def deadline(self, reserve: float = 0.0) -> float | None:
        """The perf_counter time by which a heuristic must stop to leave `reserve` x the budget."""
        return None if self.total is None else self.started + self.total * (1.0 - reserve)

    def _share(self, reserve: float) -> float | None:
        # what a MILP stage may take before leaving `reserve` x the budget (None: no budget); CBC's process
        # is stopped up to CBC_STOP_GRACE + CBC_KILL_GRACE after its limit
        left = self.left()
        if left is None:
            return None
        grace = CBC_STOP_GRACE + CBC_KILL_GRACE if self.solver == "cbc" else 0.0
        return left - reserve * float(self.total) - grace

    def stage_limit(self, reserve: float) -> float | None:
        """The solver time limit of a MILP stage that leaves `reserve` x the budget to the stages after it
        (at least MIN_STAGE_SECONDS)."""
        share = self._share(reserve)
        return None if share is None else max(MIN_STAGE_SECONDS, share)

    def spent(self, reserve: float) -> bool:
        """A MILP stage leaving `reserve` x the budget cannot have MIN_STAGE_SECONDS: skip it."""
        share = self._share(reserve)
        return share is not None and share < MIN_STAGE_SECONDS


def _within_gap(value: float, lower: float | None, gap: float) -> bool:
    """`value` is already within relative `gap` of the proven lower bound: a search has nothing to gain."""
    return lower is not None and value - lower <= gap * max(abs(value), 1e-12) + 1e-12


# --- one routed (non-combining) schedule --------------------------------------------------------

@dataclass(frozen=True)
class _Schedule:
    problem: ScheduleProblem
    orders: Orders
    timing: Timing
    routes: Routes | None = None


def _route_and_order(inst: RoutingInstance, solver: str, clock: _Clock, gap: float,
                     stages: list[StageReport]) -> tuple[_Schedule, float | None]:
    """Stages 1 and 2 for one non-combining collective. Returns the best ordered schedule and the
    routing lower bound."""
    started = time.perf_counter()
    rm = build_routing_model(inst)
    build_seconds = time.perf_counter() - started
    # greedy routings: plain shortest-time trees, congestion-aware trees, and (for switches that want
    # few connections) trees on a ring; each is scheduled, and the symmetric ones can warm-start the MILP
    started = time.perf_counter()
    greedy: list[tuple[Routes, bool]] = [heuristic_routes(inst, congestion=congestion, min_hops=hops)
                                         for congestion in (False, True) for hops in (False, True)]
    greedy.append(heuristic_routes(inst, fanout=True))
    if inst.unique_policy == "min":
        greedy.append(heuristic_routes(inst, ring_links(inst)))
    candidates: list[_Schedule] = []
    rules_of: list[str] = []  # the ordering rule that served each candidate best
    starts = []
    for routes, symmetric in greedy:
        problem = transfers_from_routes(inst, routes)
        orders, timing, rule = best_list_schedule(problem, RULES)
        candidates.append(_Schedule(problem, orders, timing, routes))
        rules_of.append(rule)
        if symmetric:
            starts.append(routing_start(inst, rm, routes))
    best_greedy = min(c.timing.makespan for c in candidates)
    stages.append(StageReport("greedy routing+order", time.perf_counter() - started, "heuristic",
                              objective=best_greedy, note=f"{len(greedy)} greedy routings"))
    # what the routing MILP cannot see: NIC order, and the spread of the chunks that cross it last
    started = time.perf_counter()
    extra = best_sketch_bound(inst)
    lower = None if extra is None else extra.value
    if extra is not None:
        stages.append(StageReport("sketch bounds", time.perf_counter() - started, "bound", bound=extra.value,
                                  note=str(extra)))
    multi_node = bool(inst.groupable) or inst.sketch.num_nodes > 1
    reserve = RESERVE_AFTER_ROUTING if multi_node else RESERVE_AFTER_ROUTING_ONE_NODE

    warm = min(starts, key=lambda x: x[rm.makespan_col]) if starts else None
    if warm is not None:
        rm.model.set_bounds(rm.makespan_col, 0.0, float(warm[rm.makespan_col]) * (1 + 1e-9) + 1e-9)
    set_makespan_objective(rm)
    note = f"built in {build_seconds:.2f} s; symmetry order {inst.symmetry.order}"
    if _within_gap(best_greedy, lower, gap):
        # a greedy schedule already meets the sketch bound: the routing MILP could neither improve it nor
        # prove more
        result = SolveResult(solver, "skipped", None, None, 0.0)
        note += f"; skipped: the greedy schedule ({best_greedy:.3f} us) is within the gap of the sketch bound"
    else:
        result = rm.model.solve(solver, time_limit=clock.stage_limit(reserve), gap=gap, warm_start=warm)
        if result.bound is not None:
            lower = result.bound if lower is None else max(lower, result.bound)
        if warm is None:
            note += "; no warm start (greedy routes not symmetric)"
    stages.append(StageReport("routing MILP", result.seconds + build_seconds, result.status, result.objective,
                              result.bound, result.gap, solver, rm.model.size(), note))
    if result.status in ("infeasible", "unbounded", "error"):
        raise MilpSynthesisError(f"routing MILP is {result.status} ({result.message}); the sketch may make the "
                                 "collective impossible")
    if result.has_solution and inst.unique_policy is not None:
        # second objective: fewest / most distinct switch links without giving up any makespan
        makespan = float(result.values[rm.makespan_col]) * (1 + 1e-7) + 1e-9
        set_connections_objective(rm, inst.unique_policy, makespan)
        fits = [x for x in starts + [result.values] if x[rm.makespan_col] <= makespan]
        warm2 = min(fits, key=rm.model.objective_value)
        if inst.unique_policy == "min" and distinct_links(rm, warm2) == min_links_lower_bound(inst):
            # a start already meets the fewest links any routing needs: nothing to search
            result = replace(result, values=warm2)
            count = distinct_links(rm, warm2)
            stages.append(StageReport("routing MILP (min links)", 0.0, "optimal", count, count, 0.0, solver, None,
                                      f"{count} distinct switch links = one into each receiving rank", "links"))
        else:
            second = rm.model.solve(solver, time_limit=clock.stage_limit(reserve), gap=gap, warm_start=warm2)
            if second.has_solution:
                result = second
            stages.append(StageReport(f"routing MILP ({inst.unique_policy} links)", second.seconds, second.status,
                                      second.objective, second.bound, second.gap, solver, None,
                                      f"{distinct_links(rm, result.values)} distinct switch links", "links"))

    if result.has_solution:
        started = time.perf_counter()
        routes = routes_from_solution(inst, rm, result.values)
        problem = transfers_from_routes(inst, routes)
        orders, timing, rule = best_list_schedule(problem, RULES)
        candidates.append(_Schedule(problem, orders, timing, routes))
        rules_of.append(rule)
        stages.append(StageReport("ordering heuristic", time.perf_counter() - started, "heuristic",
                                  objective=timing.makespan, note=f"rule {rule}; {len(problem.transfers)} transfers"))
    # local search from the best greedy routing and from the MILP's routing
    started = time.perf_counter()
    size = len(candidates[-1].problem.transfers)
    tries = 200 if size <= 600 else 20 if size <= 2500 else 0
    best_now = min(c.timing.makespan for c in candidates)
    if _within_gap(best_now, lower, gap):
        tries = 0  # already at the lower bound
    best_rule = rules_of[min(range(len(candidates)), key=lambda i: candidates[i].timing.makespan)]
    search_rules = RULES if size <= 600 else (best_rule,)
    searched = []
    picks = {min(range(len(candidates) - (1 if result.has_solution else 0)),
                 key=lambda i: candidates[i].timing.makespan), len(candidates) - 1}
    moves = 0
    stopped = False
    search_deadline = clock.deadline(RESERVE_AFTER_SEARCH if multi_node else RESERVE_AFTER_SCHEDULE)
    for i in sorted(picks):
        if tries and candidates[i].routes is not None:
            found = improve_routes(inst, candidates[i].routes, max_tries=tries, rules=search_rules,
                                   deadline=search_deadline)
            moves += found.moves
            stopped = stopped or found.stopped
            searched.append(_Schedule(found.problem, found.orders, found.timing, found.routes))
    candidates += searched
    if searched:
        stages.append(StageReport("route local search", time.perf_counter() - started,
                                  "stopped" if stopped else "heuristic", budget_cut=stopped,
                                  objective=min(c.timing.makespan for c in candidates),
                                  note=f"{moves} moves kept, up to {tries} schedules tried per start"
                                  + ("; stopped at its share of the budget" if stopped else "")))
    # inter-node chunks sent together can change which candidate is best: compare after greedy joins
    # (makespan first; for switches that ask for few/many connections, then fewer/more distinct links)
    joined = []
    sign = {"min": 1, "max": -1}.get(inst.unique_policy or "", 0)
    started = time.perf_counter()
    pattern_deadline = clock.deadline(RESERVE_AFTER_PATTERNS if multi_node else RESERVE_AFTER_SCHEDULE)
    # a schedule already at the lower bound: other groupings could only tie with it
    at_bound = _within_gap(min(c.timing.makespan for c in candidates), lower, gap)
    for cand in candidates:
        orders, timing = greedy_joins(cand.problem, cand.orders)
        if at_bound:
            patterned, pattern_timing = orders, timing
        else:
            patterned, pattern_timing = pattern_joins(cand.problem, cand.orders, deadline=pattern_deadline)
        if pattern_timing.makespan < timing.makespan - 1e-9:
            orders, timing = patterned, pattern_timing
            cand = _Schedule(cand.problem, orders, timing, cand.routes)
        distinct = len({tr.arc for tr in cand.problem.transfers} & inst.unique_links)
        joined.append((round(timing.makespan, 9), sign * distinct, cand.timing.makespan, len(joined), cand))
    best = min(joined)[-1]
    if inst.groupable:
        cut = pattern_deadline is not None and time.perf_counter() >= pattern_deadline
        stages.append(StageReport("group patterns", time.perf_counter() - started, "stopped" if cut else "heuristic",
                                  objective=best.timing.makespan, budget_cut=cut,
                                  note=f"inter-node groups for {len(candidates)} candidate schedules"
                                  + ("; patterns skipped: a schedule is at the lower bound" if at_bound else "")
                                  + ("; stopped at its share of the budget" if cut else "")))
    if inst.groupable and best.routes is not None and not _within_gap(best.timing.makespan, lower, gap):
        # the last inter-node groups re-routed exactly inside their receiving nodes, per group cut
        started = time.perf_counter()
        spread_deadline = clock.deadline(RESERVE_AFTER_SPREAD)
        found = respread_groups(inst, best.routes, best.problem, best.orders, solver=solver, lower=lower,
                                deadline=spread_deadline,
                                solve_seconds=None if clock.total is None else SPREAD_SOLVE_SHARE * clock.total)
        if found is not None:
            best = _Schedule(found.problem, found.orders, found.timing, found.routes)
        cut = spread_deadline is not None and time.perf_counter() >= spread_deadline
        stages.append(StageReport("group spread", time.perf_counter() - started, "stopped" if cut else "heuristic",
                                  objective=best.timing.makespan, solver=solver, budget_cut=cut,
                                  note=("improved" if found is not None else "no better cut found")
                                  + ("" if found is None else f"; {found.tried} cuts tried, {found.solves} spread "
                                     "MILPs solved") + ("; stopped at its share of the budget" if cut else "")))
    return best, lower


def _schedule(schedule: _Schedule, solver: str, clock: _Clock, gap: float, stages: list[StageReport],
              label: str, *, lower: float | None = None, reserve: float = RESERVE_AFTER_SCHEDULE,
              rounds: int = 3) -> _Schedule:
    """Stage 3: exact times for fixed orders, and joins of inter-node transfers. When chunks were
    joined, the orders are rebuilt around the groups and the model solved again (up to `rounds`).
    `lower` (a proven bound on every schedule) skips the stage when the schedule is already within
    the gap of it, and bounds the model's makespan from below so that the solver stops on reaching it."""
    best = schedule
    for round_ in range(rounds):
        name = f"{label} " + "{kind}" + (f" (round {round_ + 1})" if round_ else "")
        if _within_gap(best.timing.makespan, lower, gap):
            stages.append(StageReport(name.format(kind="MILP"), 0.0, "skipped", best.timing.makespan, lower,
                                      solver=solver, note="the schedule is within the gap of the lower bound"))
            break
        if clock.spent(reserve):
            # keep the (verified) schedule in hand rather than run past the budget
            stages.append(StageReport(name.format(kind="MILP"), 0.0, BUDGET_SPENT, best.timing.makespan, lower,
                                      solver=solver, budget_cut=True,
                                      note="the budget is spent: the schedule in hand is kept"))
            break
        started = time.perf_counter()
        sm = build_schedule_model(best.problem, best.orders, best.timing.makespan)
        if lower is not None:
            # valid for every schedule in the sketch; lets the solver's gap test close on the bound
            sm.model.set_bounds(sm.makespan_col, max(0.0, lower * (1 - 1e-7) - 1e-9),
                                sm.model.column_bounds(sm.makespan_col)[1])
        joined, joined_timing = greedy_joins(best.problem, replace(best.orders, joins=frozenset()))
        warm = schedule_start(best.problem, sm, joined, joined_timing)
        if joined_timing.makespan > best.timing.makespan or sm.model.violation(warm) > 1e-6:
            warm = schedule_start(best.problem, sm, best.orders, best.timing)
        result = sm.model.solve(solver, time_limit=clock.stage_limit(reserve), gap=gap, warm_start=warm)
        seconds = time.perf_counter() - started
        kind = "MILP" if sm.join_col else "LP"
        note = f"{len(sm.join_col)} join candidates"
        improved = False
        if joined_timing.makespan < best.timing.makespan - 1e-9:
            best, improved = _Schedule(best.problem, joined, joined_timing, best.routes), True
        if result.has_solution:
            joins = joins_from_solution(sm, result.values)
            orders = replace(best.orders, joins=joins)
            timing = evaluate(best.problem, orders)
            if timing.makespan > float(result.objective) + 1e-6 * max(1.0, timing.makespan):
                raise MilpSynthesisError(f"internal check failed: the {kind} says {result.objective:.6f} us but the "
                                         f"schedule takes {timing.makespan:.6f} us")
            if timing.makespan < best.timing.makespan - 1e-9 or (not improved and timing.makespan <=
                                                                  best.timing.makespan + 1e-9):
                improved = improved or timing.makespan < best.timing.makespan - 1e-9
                best = _Schedule(best.problem, orders, timing, best.routes)
            note += f", {len(best.orders.joins)} joined"
        stages.append(StageReport(name.format(kind=kind), seconds, result.status, result.objective, result.bound,
                                  result.gap, solver, sm.model.size(), note))
        if not best.orders.joins:
            break
        # reorder what follows each group, knowing when the group arrives
        try:
            orders, timing = relist_with_groups(best.problem, best.orders)
        except ScheduleError:
            break
        if timing.makespan >= best.timing.makespan - 1e-9:
            break
        best = _Schedule(best.problem, orders, timing, best.routes)
    return best


# --- reversal and concatenation -------------------------------------------------------------------

def _reverse(schedule: _Schedule, inst: RoutingInstance) -> ScheduleProblem:
    """The reduction schedule: every transfer reversed into a reduction, waiting for the reductions of
    the transfers that depended on it."""
    topo = inst.topology
    problem = schedule.problem
    transfers = []
    for t, tr in enumerate(problem.transfers):
        if not topo.has_link(tr.dst, tr.src):
            raise MilpSynthesisError(f"cannot reverse the schedule: topology {topo.name!r} has link {tr.src}->{tr.dst} "
                                     f"but no link {tr.dst}->{tr.src}")
        transfers.append(Transfer(tr.chunk, tr.dst, tr.src, REDUCE, tuple(problem.dependents[t])))
    return replace(problem, transfers=tuple(transfers), link_class={})


def _mirror(schedule: _Schedule, reversed_problem: ScheduleProblem) -> Orders:
    """Orders of the reversed transfers: mirrored in time, groups kept."""
    timing = schedule.timing
    priority = [timing.makespan - timing.arrival[t] for t in range(len(timing.start))]
    orders = orders_from_times(reversed_problem, priority)
    joins = set()
    groups: dict[int, list[int]] = {}
    for seq in schedule.orders.links.values():
        head = None
        for t in seq:
            if t in schedule.orders.joins and head is not None:
                groups[head].append(t)
            else:
                head = t
                groups[head] = [t]
    for members in groups.values():
        if len(members) > 1:
            ordered = sorted(members, key=lambda t: (priority[t], t))
            joins.update(ordered[1:])
    mirrored = replace(orders, joins=frozenset(joins))
    try:
        evaluate(reversed_problem, mirrored)
    except ScheduleError:
        return orders
    return mirrored


def _concatenate(first: _Schedule, second: _Schedule, owners: Mapping[int, int]) -> tuple[ScheduleProblem, Orders]:
    """`first` (a reduction) then `second` (an AllGather of the reduced chunks): a chunk's gather sends wait
    for every reduction of that chunk into its owner."""
    offset = len(first.problem.transfers)
    into_owner: dict[int, list[int]] = {}
    for t, tr in enumerate(first.problem.transfers):
        if owners.get(tr.chunk) == tr.dst:
            into_owner.setdefault(tr.chunk, []).append(t)
    transfers = list(first.problem.transfers)
    for tr in second.problem.transfers:
        deps = tuple(d + offset for d in tr.deps)
        if tr.src == owners.get(tr.chunk):
            deps += tuple(into_owner.get(tr.chunk, ()))
        transfers.append(replace(tr, deps=deps))
    problem = replace(first.problem, transfers=tuple(transfers), link_class={})
    shift = first.timing.makespan
    priority = list(first.timing.start) + [shift + s for s in second.timing.start]
    joins = set(first.orders.joins) | {t + offset for t in second.orders.joins}
    orders = orders_from_times(problem, priority, frozenset())
    try:
        evaluate(problem, replace(orders, joins=frozenset(joins)))
        orders = replace(orders, joins=frozenset(joins))
    except ScheduleError:
        pass
    return problem, orders


# --- Algorithm -----------------------------------------------------------------------------------

def _algorithm(name: str, topology: Topology, collective: Collective, problem: ScheduleProblem, timing: Timing,
               provenance: dict[str, Any]) -> Algorithm:
    """Steps from timed transfers: a transfer comes after the transfers it waits for (next step) and
    after earlier transfers on its link, switch ports, and reads of its destination's chunk."""
    n = len(problem.transfers)
    order = sorted(range(n), key=lambda t: (timing.start[t], timing.arrival[t], t))
    step = [0] * n
    last_on: dict[Any, int] = {}
    reads: dict[tuple[int, int], list[int]] = {}  # (chunk, rank) -> transfers that read it so far
    for t in order:
        tr = problem.transfers[t]
        s = 0
        for d in tr.deps:
            s = max(s, step[d] + 1)
        keys = [("link", tr.arc)] + [("budget", r) for r in problem.resources_of.get(tr.arc, ())]
        for key in keys:
            if key in last_on:
                s = max(s, step[last_on[key]])
        for r in reads.get((tr.chunk, tr.dst), ()):
            s = max(s, step[r])
        step[t] = s
        for key in keys:
            last_on[key] = t
        reads.setdefault((tr.chunk, tr.src), []).append(t)
    steps = []
    for s in range(max(step, default=-1) + 1):
        members = sorted((t for t in range(n) if step[t] == s), key=lambda t: (timing.start[t], t))
        if not members:
            continue
        per_link: dict[tuple[int, int], int] = {}
        for t in members:
            per_link[problem.transfers[t].arc] = per_link.get(problem.transfers[t].arc, 0) + 1
        rounds = 1
        for arc, count in per_link.items():
            rounds = max(rounds, math.ceil(count / max(1, topology.bandwidth(*arc))))
        for switch in topology.switches:
            count = sum(per_link.get(arc, 0) for arc in switch.links)
            rounds = max(rounds, math.ceil(count / max(1, switch.bandwidth)))
        sends = tuple(Send(problem.transfers[t].chunk, problem.transfers[t].src, problem.transfers[t].dst,
                           problem.transfers[t].op, round(timing.start[t], 6),
                           round(timing.arrival[t] - timing.start[t], 6)) for t in members)
        steps.append(Step(rounds, sends))
    return Algorithm(name, topology, collective, tuple(steps), provenance)


# --- the pipeline --------------------------------------------------------------------------------

def synthesize_milp(topology: Topology, collective: str | Collective, sketch: Sketch, size_bytes: int, *,
                    solver: str = "cbc", time_limit: float | None = None, gap: float = 1e-4,
                    root: int | None = None) -> MilpResult:
    """Synthesize a schedule for `collective` on `topology` within `sketch` (module docstring).

    `time_limit` is the wall-clock budget of the whole run, in seconds (None: no limit): MILP stages
    share what is left, a stopped stage keeps its best answer, and the result reports the proven gap
    and whether the budget cut a stage short (`MilpResult.time_limited`). Without a binding limit the
    result is deterministic."""
    if solver not in SOLVERS:
        raise SolverError(f"unknown solver {solver!r}; use cbc or highs")
    if size_bytes <= 0:
        raise MilpSynthesisError(f"size must be > 0 bytes, got {size_bytes}")
    if time_limit is not None and time_limit <= 0:
        raise MilpSynthesisError(f"time limit must be > 0 seconds, got {time_limit}")
    name = collective if isinstance(collective, str) else collective.name
    key = canonical_name(name)
    if isinstance(collective, Collective) and collective.chunks != sketch.chunkup:
        raise MilpSynthesisError(f"the collective has chunk factor {collective.chunks} but the sketch's chunkup is "
                                 f"{sketch.chunkup}; make them equal")
    target = collective if isinstance(collective, Collective) else make_collective(
        key, topology.num_ranks, sketch.chunkup, root=root)
    chunk_bytes = size_bytes / sketch.chunkup
    stages: list[StageReport] = []
    started = time.perf_counter()
    clock = _Clock(started, time_limit, solver)

    if not target.combining:
        inst = build_instance(topology, target, sketch, chunk_bytes)
        best, lower = _route_and_order(inst, solver, clock, gap, stages)
        final = _schedule(best, solver, clock, gap, stages, "schedule", lower=lower)
        problem, timing = final.problem, final.timing
    elif key in _DUALS:
        dual = make_collective(_DUALS[key], topology.num_ranks, sketch.chunkup, root=target.root)
        inst = build_instance(topology, dual, sketch, chunk_bytes)
        best, dual_lower = _route_and_order(inst, solver, clock, gap, stages)
        forward = _schedule(best, solver, clock, gap, stages, "schedule (dual)", lower=dual_lower, reserve=0.15)
        reversed_problem = _reverse(forward, inst)
        orders = _mirror(forward, reversed_problem)
        mirrored = _Schedule(reversed_problem, orders, evaluate(reversed_problem, orders))
        final = _schedule(mirrored, solver, clock, gap, stages, "reduce schedule")
        problem, timing = final.problem, final.timing
        lower = None  # the routing bound is for the non-combining dual
    elif key == "allreduce":
        gather = make_collective("allgather", topology.num_ranks, sketch.chunkup)
        inst = build_instance(topology, gather, sketch, chunk_bytes)
        best, gather_lower = _route_and_order(inst, solver, clock, gap, stages)
        forward = _schedule(best, solver, clock, gap, stages, "allgather", lower=gather_lower, reserve=0.15)
        reversed_problem = _reverse(forward, inst)
        orders = _mirror(forward, reversed_problem)
        reduce = _Schedule(reversed_problem, orders, evaluate(reversed_problem, orders))
        owners = {c: inst.chunks[c].sources[0] for c in range(len(inst.chunks))}
        problem, orders = _concatenate(reduce, forward, owners)
        merged = _Schedule(problem, orders, evaluate(problem, orders))
        final = _schedule(merged, solver, clock, gap, stages, "allreduce")
        problem, timing = final.problem, final.timing
        lower = None  # the routing bound holds for the AllGather half only
    else:
        raise MilpSynthesisError(f"MILP synthesis does not handle {target.name} (combining, no non-combining dual); "
                                 "use AllReduce, ReduceScatter, Reduce or a non-combining collective")

    if lower is not None and lower > timing.makespan:
        # the routing bound holds for every schedule in the sketch; beyond solver tolerance this is a bug
        if lower > timing.makespan * (1 + 1e-6) + 1e-9:
            raise MilpSynthesisError(f"internal check failed: lower bound {lower:.6f} us exceeds the schedule's "
                                     f"{timing.makespan:.6f} us")
        lower = timing.makespan
    limited = time_limit is not None and any(s.budget_cut or s.status in ("feasible", "no_solution", "stopped")
                                             for s in stages)
    provenance: dict[str, Any] = {
        "synthesizer": "milp", "solver": solver, "sketch": sketch.name or str(sketch), "size_bytes": size_bytes,
        "chunk_bytes": chunk_bytes, "predicted_us": round(timing.makespan, 6),
        "lower_bound_us": None if lower is None else round(lower, 6), "time_limit_s": time_limit,
        "time_limited": limited,
    }
    algo_name = f"milp_{target.name}_{topology.name}_{sketch.name or 'sketch'}".replace(":", "_").replace("/", "_")
    algorithm = _algorithm(algo_name, topology, target, problem, timing, provenance)
    started_verify = time.perf_counter()
    verify(algorithm)
    stages.append(StageReport("verify", time.perf_counter() - started_verify, "ok"))
    # one wall-clock figure for the whole run (verification included), in the result and its provenance
    total = time.perf_counter() - started
    provenance.update({"seconds": round(total, 3), "stages": [s.to_dict() for s in stages]})
    algorithm = replace(algorithm, provenance=provenance)
    return MilpResult(algorithm, timing.makespan, lower, tuple(stages), size_bytes, chunk_bytes, solver, sketch,
                      time_limit, limited, total)


# --- report --------------------------------------------------------------------------------------

def write_report(result: MilpResult, directory: str | os.PathLike[str]) -> list[Path]:
    """report.md (stages, model sizes, times, status, predicted time), timeline.txt, timeline.png,
    algorithm.json and report.json in `directory` (created if needed). Each file is written atomically."""
    from collsynth.synth.timeline import plot_timeline, timeline_text

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    text = timeline_text(result.algorithm)
    md = ["# MILP synthesis report", "", "```", result.summary(), "```", "", "## Stages", "",
          "| stage | status | seconds | objective | bound | unit | gap | model |",
          "|---|---|---:|---:|---:|---|---:|---|"]
    for s in result.stages:
        md.append(f"| {s.name} | {s.status} | {s.seconds:.3f} | {_num(s.objective)} | {_num(s.bound)} | {s.unit} | "
                  f"{'' if s.gap is None else f'{100 * s.gap:.2f}%'} | {s.size or ''} |")
    for s in result.stages:
        if s.size is not None and s.size.families:
            md += ["", f"### {s.name}: rows per constraint family", ""]
            md += [f"- {fam}: {count}" for fam, count in s.size.families]
    md += ["", "## Timeline", "", "![timeline](timeline.png)", "", "```", text, "```", ""]
    written.append(plot_timeline(result.algorithm, out / "timeline.png"))  # before report.md, which links it
    written.append(write_atomic(out / "report.md", "\n".join(md)))
    written.append(write_atomic(out / "timeline.txt", text + "\n"))
    written.append(write_atomic(out / "algorithm.json", result.algorithm.to_json()))
    report = {"predicted_us": result.predicted_us, "lower_bound_us": result.lower_bound_us, "gap": result.gap,
              "time_limit_s": result.time_limit, "time_limited": result.time_limited, "seconds": result.seconds,
              "solver": result.solver, "size_bytes": result.size_bytes, "chunk_bytes": result.chunk_bytes,
              "stages": [s.to_dict() for s in result.stages]}
    written.append(write_atomic(out / "report.json", json.dumps(report, indent=1)))
    return written


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"




__all__ = ["MilpResult", "MilpSynthesisError", "StageReport", "synthesize_milp", "write_report"]
