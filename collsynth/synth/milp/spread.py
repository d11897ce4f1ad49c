"""Group spread search: try the inter-node group cuts of `pattern_trials` whose cheap estimate could beat the
schedule in hand, solve the spread of each receiving node (`collsynth.encodings.milp_spread`, once per
symmetry orbit), splice the new trees into the routes and re-evaluate the whole schedule exactly, keeping
the best. Every result is an ordinary routed schedule, verified by the pipeline like any other."""

from __future__ import annotations

from dataclasses import dataclass, replace
from types import MappingProxyType

from collsynth.encodings.milp_bounds import group_spread_time
from collsynth.encodings.milp_instance import Arc, RoutingInstance
from collsynth.encodings.milp_ordering import Orders, ScheduleError, ScheduleProblem, Timing, evaluate
from collsynth.encodings.milp_spread import (
    EPS,
    MAX_SPREAD_SOLVES,
    Spread,
    SpreadProblem,
    closed_entries,
    inside,
    solve_spread,
    spread_window,
)
from collsynth.encodings.taccl_milp import Routes, RoutingError, check_routes, transfers_from_routes
from collsynth.synth.milp.ordering import SecondsLeft, Stop, never, pattern_trials, unlimited

# a cut whose estimate is not below the schedule in hand by this share is not solved
ESTIMATE_MARGIN_REL = 1e-6
# the schedule in hand within this share of the proven bound: stop searching
BOUND_REACHED_REL = 1e-6


@dataclass(frozen=True)
class Respread:
    routes: Routes
    problem: ScheduleProblem
    orders: Orders
    timing: Timing
    solves: int  # spread MILPs solved
    tried: int  # group cuts whose estimate could beat the schedule in hand
    note: str = ""


def splice(inst: RoutingInstance, problem: ScheduleProblem, orders: Orders, timing: Timing, routes: Routes,
           spreads: list[tuple[SpreadProblem, Spread]]) -> tuple[Routes, ScheduleProblem, Orders, Timing]:
    """The schedule with each window's chunks on their new trees inside the node: links and budgets inside
    the nodes are re-ordered by start time (the spread's for moved transfers, the old for the others);
    other links keep their orders and joins. Raises RoutingError / ScheduleError if that fails."""
    trees = list(routes.trees)
    new_start: dict[tuple[int, Arc], float] = {}
    nodes = set()
    for sp, spread in spreads:
        nodes.add(sp.node)
        for i, c in enumerate(sp.chunks):
            trees[c] = tuple(sorted([a for a in trees[c] if not inside(inst, sp.node, a)] + list(spread.trees[i])))
        new_start.update(spread.starts)
    new_routes = check_routes(inst, Routes(tuple(trees)))
    new_problem = transfers_from_routes(inst, new_routes)
    old_index = {(tr.chunk, tr.arc): t for t, tr in enumerate(problem.transfers)}
    index = {(tr.chunk, tr.arc): t for t, tr in enumerate(new_problem.transfers)}
    priority = []
    for tr in new_problem.transfers:
        key = (tr.chunk, tr.arc)
        priority.append(new_start[key] if key in new_start else timing.start[old_index[key]])

    def remap(seq: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(index[(problem.transfers[t].chunk, problem.transfers[t].arc)] for t in seq)

    def by_priority(members: list[int]) -> tuple[int, ...]:
        return tuple(sorted(members, key=lambda t: (priority[t], new_problem.transfers[t].arc, t)))

    touched = {a for a in inst.link_cost if any(inside(inst, nd, a) for nd in nodes)}
    links: dict[Arc, tuple[int, ...]] = {}
    per_link: dict[Arc, list[int]] = {}
    for t, tr in enumerate(new_problem.transfers):
        per_link.setdefault(tr.arc, []).append(t)
    for a, members in per_link.items():
        links[a] = by_priority(members) if a in touched else remap(orders.links[a])
    budgets = []
    for r, res in enumerate(inst.resources):
        if res.links & touched:
            budgets.append(by_priority([t for a in res.links for t in per_link.get(a, ())]))
        else:
            budgets.append(remap(orders.resources[r]))
    joins = frozenset(index[(problem.transfers[t].chunk, problem.transfers[t].arc)] for t in orders.joins)
    new_orders = Orders(MappingProxyType(links), tuple(budgets), joins)
    return new_routes, new_problem, new_orders, evaluate(new_problem, new_orders)


def cut_estimate(inst: RoutingInstance, problem: ScheduleProblem, timing: Timing, routes: Routes) -> float:
    # estimate = max over nodes N, entry ranks v, arrival times e of max(e + ecc, e + group_spread(G_{N,v,e}))
    """A lower bound on any re-spread of the schedule's remote chunks inside their nodes, with its
    inter-node transfers timed as they are: each group of chunks that arrives at v at e still has to
    reach all its targets in the node from v alone (`group_spread_time`)."""
    arrival_of = {(tr.chunk, tr.arc): timing.arrival[t] for t, tr in enumerate(problem.transfers)}
    worst = 0.0
    for node in range(inst.sketch.num_nodes):
        groups: dict[tuple[int, float], list[int]] = {}
        for c, a in closed_entries(inst, routes, node).items():
            groups.setdefault((a[1], round(arrival_of[(c, a)], 9)), []).append(c)
        for (v, at), chunks in groups.items():
            worst = max(worst, at + group_spread_time(inst, chunks, v, node))
    return worst


def respread_groups(inst: RoutingInstance, routes: Routes, problem: ScheduleProblem, orders: Orders, *,
                    solver: str = "highs", lower: float | None = None, stop: Stop = never,
                    seconds_left: SecondsLeft = unlimited, max_solves: int = MAX_SPREAD_SOLVES,
                    solve_seconds: float | None = None) -> Respread | None:
    """Try the inter-node group cuts of `pattern_trials` on the schedule (routes, problem, orders), most
    promising first by `cut_estimate`; for each, solve the spread of the last groups in every receiving
    node and splice it in. Returns the best schedule found if it beats the one given, else None.
    `lower` (a proven bound on every schedule) stops the search on reaching it; when `stop()` says so it stops
    and keeps what it has; a spread MILP's limit is `seconds_left()` (the stage clock's time to its deadline,
    less the solver's stop grace; None: no limit), capped by `solve_seconds`."""
    timing = evaluate(problem, orders)
    best: tuple[Routes, ScheduleProblem, Orders, Timing] | None = None
    best_makespan = timing.makespan
    floor = 0.0 if lower is None else lower
    scored = []
    for k, (_, trial) in enumerate(pattern_trials(problem, orders, stop=stop)):
        try:
            trial_timing = evaluate(problem, trial)
        except ScheduleError:
            continue
        estimate = cut_estimate(inst, problem, trial_timing, routes)
        scored.append((round(estimate, 9), round(trial_timing.makespan, 9), k, trial, trial_timing))
    scored.sort(key=lambda item: item[:3])
    solves = tried = 0
    for estimate, _, _, trial, trial_timing in scored:
        if estimate >= best_makespan - ESTIMATE_MARGIN_REL * best_makespan or solves >= max_solves:
            break
        if best_makespan <= floor * (1 + BOUND_REACHED_REL) + EPS:
            break
        if stop():
            break
        tried += 1
        spreads = _solve_nodes(inst, problem, trial_timing, routes, solver, best_makespan, floor, seconds_left,
                               solve_seconds)
        solves += sum(1 for _, _, solved in spreads if solved)
        pairs = [(sp, spread) for sp, spread, _ in spreads if spread is not None]
        if not pairs:
            continue
        try:
            found = splice(inst, problem, trial, trial_timing, routes, pairs)
        except (RoutingError, ScheduleError):
            continue
        if found[3].makespan < best_makespan - EPS:
            best, best_makespan = found, found[3].makespan
    if best is None:
        return None
    return Respread(*best, solves=solves, tried=tried)


def _solve_nodes(inst: RoutingInstance, problem: ScheduleProblem, timing: Timing, routes: Routes, solver: str,
                 upper: float, floor: float, seconds_left: SecondsLeft,
                 solve_seconds: float | None = None) -> list[tuple[SpreadProblem, Spread | None, bool]]:
    """The window of every receiving node, solved once per symmetry orbit (an image of a solved window
    takes the mapped answer). Each entry: (window, its spread or None, whether a MILP was solved)."""
    solved: list[tuple[SpreadProblem, Spread | None]] = []
    out = []
    for node in range(inst.sketch.num_nodes):
        sp = spread_window(inst, problem, timing, routes, node)
        if sp is None:
            continue
        mapped = next((m for m in (_map_spread(inst, done, answer, sp) for done, answer in solved) if m is not None),
                      None)
        if mapped is not None:
            out.append((sp, mapped[0], False))
            continue
        left = seconds_left()
        if left is not None and left <= 0:
            break  # past the deadline (or too close to it for CBC to stop in time): the rest keep their trees
        if solve_seconds is not None:
            left = solve_seconds if left is None else min(left, solve_seconds)
        spread = solve_spread(sp, solver, upper=upper - EPS, lower=floor, time_limit=left)
        solved.append((sp, spread))
        out.append((sp, spread, True))
    return out


def _map_spread(inst: RoutingInstance, done: SpreadProblem, answer: Spread | None,
                sp: SpreadProblem) -> tuple[Spread | None] | None:
    """(the answer mapped onto `sp`,) when some symmetry maps window `done` exactly onto `sp`, else None."""
    sym = inst.symmetry
    for g in range(sym.order):
        perm, cperm = sym.rank_perms[g], sym.chunk_perms[g]
        if any(inst.node_of(perm[r]) != sp.node for r in done.entry):
            continue
        if _image(done, perm, cperm, inst) != _canonical(sp):
            continue
        if answer is None:
            return (None,)
        trees = tuple(tuple(sorted((perm[u], perm[v]) for u, v in tree)) for tree in answer.trees)
        order = {cperm[c]: i for i, c in enumerate(done.chunks)}
        trees = tuple(trees[order[c]] for c in sp.chunks)
        starts = {(cperm[c], (perm[a[0]], perm[a[1]])): t for (c, a), t in answer.starts.items()}
        return (Spread(answer.status, answer.makespan, trees, MappingProxyType(starts)),)
    return None


def _canonical(sp: SpreadProblem) -> tuple:
    rows = sorted((c, e, round(r, 9), t, a) for c, e, r, t, a in
                  zip(sp.chunks, sp.entry, sp.ready, sp.targets, sp.arcs_of, strict=True))
    busy = tuple(sorted((a, tuple((round(b, 9), round(e, 9)) for b, e in v)) for a, v in sp.busy.items()))
    budgets = tuple(sorted((tuple(sorted(bud)), tuple((round(b, 9), round(e, 9)) for b, e in v))
                           for bud, v in zip(sp.budgets, sp.budget_busy, strict=True)))
    return tuple(rows), busy, budgets


def _image(sp: SpreadProblem, perm: tuple[int, ...], cperm: tuple[int, ...], inst: RoutingInstance) -> tuple:
    def arc(a: Arc) -> Arc:
        return perm[a[0]], perm[a[1]]

    image = replace(
        sp, node=inst.node_of(perm[sp.entry[0]]), chunks=tuple(cperm[c] for c in sp.chunks),
        entry=tuple(perm[e] for e in sp.entry), targets=tuple(tuple(sorted(perm[d] for d in t)) for t in sp.targets),
        arcs_of=tuple(tuple(sorted(arc(a) for a in arcs)) for arcs in sp.arcs_of),
        budgets=tuple(frozenset(arc(a) for a in bud) for bud in sp.budgets),
        busy=MappingProxyType({arc(a): v for a, v in sp.busy.items()}))
    return _canonical(image)
