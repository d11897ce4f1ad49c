"""Exact spreading of the last inter-node groups inside their receiving node, and the group cuts it serves.

The ordering heuristics route each chunk on a fixed tree chosen before anyone knows which chunks cross
a NIC together. When several chunks arrive at one relay GPU at once and one more follows soon after,
good trees for the group differ from good trees for each chunk alone: the group has to be spread so
that the relay's links are free again when the last chunk arrives. This module re-routes and re-times
those chunks exactly:

- a `SpreadProblem` is one receiving node's window: the remote chunks that enter it last (each at one
  entry rank, at a fixed time, with its targets in the node), the node's links, and the intervals in
  which transfers that stay as they are already hold those links and budgets;
- `solve_spread` solves it as a small MILP (continuous start times, a tree per chunk, one transfer at a
  time per link and budget by big-M disjunctions; `_spread_model` lists the constraint families);
- `respread_groups` tries the inter-node group cuts of `pattern_trials` whose cheap estimate could beat
  the schedule in hand, solves the spread of each receiving node (once per symmetry orbit), splices the
  new trees into the routes and re-evaluates the whole schedule exactly, keeping the best.
Every result is an ordinary routed schedule (routes, transfers, orders, exact timing), so the pipeline
verifies it like any other.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from types import MappingProxyType

from collsynth.encodings.milp_bounds import group_spread_time
from collsynth.encodings.milp_instance import Arc, RoutingInstance, arc_adjacency, shortest_times
from collsynth.encodings.milp_model import CBC_KILL_GRACE, CBC_STOP_GRACE, MilpModel
from collsynth.encodings.milp_ordering import Orders, ScheduleError, ScheduleProblem, Timing, evaluate, pattern_trials
from collsynth.encodings.taccl_milp import Routes, RoutingError, check_routes, transfers_from_routes

INF = math.inf
MAX_SPREAD_CHUNKS = 8  # the most chunks one window re-routes (whole arrival groups, latest first)
MAX_SPREAD_SOLVES = 6  # the most group cuts whose spread is solved in one call
MAX_BINARIES = 6000  # a window whose model would need more ordering binaries is left alone
EPS = 1e-9

Interval = tuple[float, float]


@dataclass(frozen=True)
class SpreadProblem:
    """One receiving node's window (module docstring). Chunk i enters at `entry[i]` at `ready[i]` and must
    reach `targets[i]`; it may use `arcs_of[i]` (links inside the node the sketch allows it); `busy`
    and `budget_busy` are the intervals that fixed transfers hold each link and budget."""
    node: int
    chunks: tuple[int, ...]
    entry: tuple[int, ...]
    ready: tuple[float, ...]
    targets: tuple[tuple[int, ...], ...]
    arcs_of: tuple[tuple[Arc, ...], ...]
    cost: Mapping[Arc, float]
    budgets: tuple[frozenset[Arc], ...]
    busy: Mapping[Arc, tuple[Interval, ...]]
    budget_busy: tuple[tuple[Interval, ...], ...]


@dataclass(frozen=True)
class Spread:
    """A solved window: per chunk, its tree inside the node and the start of each of its transfers."""
    status: str
    makespan: float
    trees: tuple[tuple[Arc, ...], ...]
    starts: Mapping[tuple[int, Arc], float]


@dataclass(frozen=True)
class Respread:
    routes: Routes
    problem: ScheduleProblem
    orders: Orders
    timing: Timing
    solves: int  # spread MILPs solved
    tried: int  # group cuts whose estimate could beat the schedule in hand
    note: str = ""


# --- the window of one node ----------------------------------------------------------------------

def _inside(inst: RoutingInstance, node: int, a: Arc) -> bool:
    return inst.node_of(a[0]) == node and inst.node_of(a[1]) == node


def _closed_entries(inst: RoutingInstance, routes: Routes, node: int) -> dict[int, Arc]:
    """Chunks whose tree enters `node` over exactly one link and never leaves it again, with that link
    (their part inside the node can be re-routed without touching anything outside)."""
    out = {}
    for c, tree in enumerate(routes.trees):
        if any(inst.node_of(s) == node for s in inst.chunks[c].sources):
            continue
        entries = [a for a in tree if inst.node_of(a[1]) == node and inst.node_of(a[0]) != node]
        exits = [a for a in tree if inst.node_of(a[0]) == node and inst.node_of(a[1]) != node]
        if len(entries) == 1 and not exits:
            out[c] = entries[0]
    return out


def spread_window(inst: RoutingInstance, problem: ScheduleProblem, timing: Timing, routes: Routes,
                  node: int) -> SpreadProblem | None:
    """The window of `node` in a timed schedule: the latest-arriving whole groups of re-routable remote
    chunks (at most MAX_SPREAD_CHUNKS), and what every other transfer holds from the first of them on."""
    entries = _closed_entries(inst, routes, node)
    arrival_of: dict[tuple[int, Arc], float] = {}
    for t, tr in enumerate(problem.transfers):
        arrival_of[(tr.chunk, tr.arc)] = timing.arrival[t]
    by_time: dict[float, list[int]] = {}
    for c, a in entries.items():
        by_time.setdefault(round(arrival_of[(c, a)], 9), []).append(c)
    chosen: list[int] = []
    later = INF  # the arrival of the group after this one
    for at in sorted(by_time, reverse=True):
        group = sorted(by_time[at])
        if len(chosen) + len(group) > MAX_SPREAD_CHUNKS:
            break
        # chunks arriving at once over different NICs spread from their own entry ranks (as in cut_estimate)
        by_entry: dict[int, list[int]] = {}
        for c in group:
            by_entry.setdefault(entries[c][1], []).append(c)
        spread = max(group_spread_time(inst, members, v, node) for v, members in by_entry.items())
        if chosen and at + 2 * spread <= later:
            break  # an earlier group that has long been spread when the next one arrives stays as it is
        chosen += group
        later = at
    if not chosen:
        return None
    chosen.sort(key=lambda c: (arrival_of[(c, entries[c])], c))
    first = min(arrival_of[(c, entries[c])] for c in chosen)
    moving = set(chosen)
    busy: dict[Arc, list[Interval]] = {}
    budget_index = [i for i, res in enumerate(inst.resources) if any(_inside(inst, node, a) for a in res.links)]
    budget_busy: list[list[Interval]] = [[] for _ in budget_index]
    for t, tr in enumerate(problem.transfers):
        if tr.chunk in moving and _inside(inst, node, tr.arc):
            continue
        if timing.arrival[t] <= first + EPS:
            continue
        # a fixed transfer holds its link and budgets from its start to its group's arrival
        span = (timing.start[t], timing.arrival[t])
        if _inside(inst, node, tr.arc):
            busy.setdefault(tr.arc, []).append(span)
        for j, r in enumerate(budget_index):
            if tr.arc in inst.resources[r].links:
                budget_busy[j].append(span)
    return SpreadProblem(
        node=node, chunks=tuple(chosen), entry=tuple(entries[c][1] for c in chosen),
        ready=tuple(arrival_of[(c, entries[c])] for c in chosen),
        targets=tuple(tuple(sorted(d for d in inst.chunks[c].targets if inst.node_of(d) == node and d != entries[c][1]))
                      for c in chosen),
        arcs_of=tuple(tuple(sorted(a for a in inst.chunks[c].arcs if _inside(inst, node, a) and a[1] != entries[c][1]))
                      for c in chosen),
        cost=inst.link_cost, budgets=tuple(frozenset(a for a in inst.resources[r].links if _inside(inst, node, a))
                                           for r in budget_index),
        busy=MappingProxyType({a: tuple(sorted(set(v))) for a, v in busy.items()}),
        budget_busy=tuple(tuple(sorted(set(v))) for v in budget_busy))


# --- the spread MILP ------------------------------------------------------------------------------

def solve_spread(sp: SpreadProblem, solver: str, *, upper: float, lower: float = 0.0,
                 time_limit: float | None = None) -> Spread | None:
    """The least makespan of the window's chunks (below `upper`, else None), with their trees and start
    times; `lower` is a makespan the caller cannot beat anyway (the solver stops on reaching it)."""
    built = _spread_model(sp, upper, lower)
    if built is None:
        return None
    model, x, s = built
    result = model.solve(solver, time_limit=time_limit, gap=1e-6)
    if not result.has_solution:
        return None
    values = result.values
    trees = tuple(tuple(a for a in sp.arcs_of[i] if (i, a) in x and values[x[i, a]] > 0.5)
                  for i in range(len(sp.chunks)))
    starts = {(sp.chunks[i], a): float(values[s[i, a]]) for i in range(len(sp.chunks)) for a in trees[i]}
    return Spread(result.status, float(result.objective), trees, MappingProxyType(starts))


def _spread_model(sp: SpreadProblem, upper: float, lower: float):
    """Families (i, j chunks; a = (u, v) a link; x_ia: i crosses a; s_ia its start there; t_iv: i at v; T):
    receive_once  sum_u x_i(u,v) = 1 for targets v, <= 1 otherwise
    send_held     x_i(u,v) <= sum_w x_i(w,u)                        for u not i's entry
    after_arrival s_ia >= t_iu - M (1 - x_ia)
    arrive        t_iv >= s_ia + cost_a - M (1 - x_ia)
    one_at_a_time s_jb >= s_ia + cost_a - M (3 - y - x_ia - x_jb), and the same the other way (a, b
                  the same link or links of one budget, for two chunks or one chunk's two links of a
                  budget, unless their time windows cannot overlap)
    around_fixed  s_ia >= e - M (2 - z - x_ia), s_ia + cost_a <= b + M (1 + z - x_ia)  for each fixed
                  interval [b, e) on a or its budgets that the window of s_ia overlaps
    makespan      T >= t_iv for targets v; minimize T
    interchangeable t_iv0 <= t_jv0 for i < j with the same entry, time, targets and links (v0: their first
                  target; any schedule can swap such chunks' trees to meet it).
    Time windows: t_iv >= ready_i + dist_i(v), s_ia in [ready_i + dist_i(u), upper - cost_a] (dist: the
    shortest time from the entry over i's links); links that cannot end by `upper` get no column; each
    big-M is the widest gap its row's windows allow."""
    n = len(sp.chunks)
    horizon = upper
    dist = [shortest_times(arc_adjacency(sp.arcs_of[i], sp.cost), (sp.entry[i],)) for i in range(n)]
    usable = [tuple(a for a in sp.arcs_of[i] if a[0] in dist[i] and
                    sp.ready[i] + dist[i][a[0]] + sp.cost[a] <= horizon + EPS) for i in range(n)]
    if not any(usable):
        return None
    s_lo = {(i, a): sp.ready[i] + dist[i][a[0]] for i in range(n) for a in usable[i]}
    # (max: a link usable only within EPS keeps a column with lb <= ub, which CBC insists on)
    s_hi = {(i, a): max(s_lo[i, a], horizon - sp.cost[a]) for i in range(n) for a in usable[i]}

    def fixed_on(a: Arc) -> list[Interval]:
        out = list(sp.busy.get(a, ()))
        for k, bud in enumerate(sp.budgets):
            if a in bud:
                out += sp.budget_busy[k]
        return sorted(set(out))

    def conflict(i: int, a: Arc, j: int, b: Arc) -> bool:
        shared = a == b or any(a in bud and b in bud for bud in sp.budgets)
        return shared and s_lo[i, a] < s_hi[j, b] + sp.cost[b] - EPS and s_lo[j, b] < s_hi[i, a] + sp.cost[a] - EPS

    pairs = [(i, a, j, b) for i, j in itertools.combinations(range(n), 2) for a in usable[i] for b in usable[j]
             if conflict(i, a, j, b)]
    # one chunk's transfers on two links of one budget (e.g. two links out of one port) take turns too
    pairs += [(i, a, i, b) for i in range(n) for a, b in itertools.combinations(usable[i], 2) if conflict(i, a, i, b)]
    around = [(i, a, b, e) for i in range(n) for a in usable[i] for b, e in fixed_on(a)
              if s_lo[i, a] < e - EPS and b < s_hi[i, a] + sp.cost[a] - EPS]
    if len(pairs) + len(around) > MAX_BINARIES:
        return None
    if max(lower, max(sp.ready)) > horizon:
        return None
    m = MilpModel("spread")
    makespan = m.add_columns(1, lb=max(lower, max(sp.ready)), ub=horizon, cost=1.0)[0]
    x: dict[tuple[int, Arc], int] = {}
    s: dict[tuple[int, Arc], int] = {}
    arrival: list[dict[int, int]] = []
    for i in range(n):
        ranks = sorted(v for v in dist[i] if v == sp.entry[i] or any(a[1] == v for a in usable[i]))
        if any(v not in ranks for v in sp.targets[i]):
            return None  # a target cannot be reached by `upper`
        t = {v: m.add_columns(1, lb=sp.ready[i] + dist[i][v],
                              ub=sp.ready[i] if v == sp.entry[i] else max(horizon, sp.ready[i] + dist[i][v]))[0]
             for v in ranks}
        arrival.append(t)
        for a in usable[i]:
            x[i, a] = m.add_binaries(1)[0]
            s[i, a] = m.add_columns(1, lb=s_lo[i, a], ub=s_hi[i, a])[0]
        for a in usable[i]:
            u, v = a
            wait = horizon - s_lo[i, a]
            m.add_row("after_arrival", [s[i, a], t[u], x[i, a]], [1.0, -1.0, -wait], lo=-wait)
            gap = s_hi[i, a] + sp.cost[a] - (sp.ready[i] + dist[i][v])
            m.add_row("arrive", [t[v], s[i, a], x[i, a]], [1.0, -1.0, -gap], lo=sp.cost[a] - gap)
            if u != sp.entry[i]:
                into = [x[i, b] for b in usable[i] if b[1] == u]
                m.add_row("send_held", [x[i, a]] + into, [1.0] + [-1.0] * len(into), hi=0.0)
        for v in ranks:
            if v == sp.entry[i]:
                continue
            into = [x[i, a] for a in usable[i] if a[1] == v]
            need = v in sp.targets[i]
            m.add_row("receive_once", into, [1.0] * len(into), lo=1.0 if need else 0.0, hi=1.0)
            if need:
                m.add_row("makespan", [makespan, t[v]], [1.0, -1.0], lo=0.0)
    for i, j in itertools.combinations(range(n), 2):
        if (sp.entry[i], sp.ready[i], sp.targets[i], sp.arcs_of[i]) == (sp.entry[j], sp.ready[j], sp.targets[j],
                                                                       sp.arcs_of[j]) and sp.targets[i]:
            first = sp.targets[i][0]
            m.add_row("interchangeable", [arrival[j][first], arrival[i][first]], [1.0, -1.0], lo=0.0)
    for i, a, j, b in pairs:
        y = m.add_binaries(1)[0]
        m1 = s_hi[i, a] + sp.cost[a] - s_lo[j, b]
        m2 = s_hi[j, b] + sp.cost[b] - s_lo[i, a]
        m.add_row("one_at_a_time", [s[j, b], s[i, a], y, x[i, a], x[j, b]], [1.0, -1.0, -m1, -m1, -m1],
                  lo=sp.cost[a] - 3 * m1)
        m.add_row("one_at_a_time", [s[i, a], s[j, b], y, x[i, a], x[j, b]], [1.0, -1.0, m2, -m2, -m2],
                  lo=sp.cost[b] - 2 * m2)
    for i, a, b, e in around:
        z = m.add_binaries(1)[0]
        after = e - s_lo[i, a]
        before = s_hi[i, a] + sp.cost[a] - b
        m.add_row("around_fixed", [s[i, a], z, x[i, a]], [1.0, -after, -after], lo=e - 2 * after)
        m.add_row("around_fixed", [s[i, a], z, x[i, a]], [1.0, -before, before], hi=b - sp.cost[a] + before)
    return m, x, s


# --- splicing a solved window into a schedule ------------------------------------------------------

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
            trees[c] = tuple(sorted([a for a in trees[c] if not _inside(inst, sp.node, a)] + list(spread.trees[i])))
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

    touched = {a for a in inst.link_cost if any(_inside(inst, nd, a) for nd in nodes)}
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


# --- group cuts -----------------------------------------------------------------------------------

def cut_estimate(inst: RoutingInstance, problem: ScheduleProblem, timing: Timing, routes: Routes) -> float:
    # estimate = max over nodes N, entry ranks v, arrival times e of max(e + ecc, e + group_spread(G_{N,v,e}))
    """A lower bound on any re-spread of the schedule's remote chunks inside their nodes, with its
    inter-node transfers timed as they are: each group of chunks that arrives at v at e still has to
    reach all its targets in the node from v alone (`group_spread_time`)."""
    arrival_of = {(tr.chunk, tr.arc): timing.arrival[t] for t, tr in enumerate(problem.transfers)}
    worst = 0.0
    for node in range(inst.sketch.num_nodes):
        groups: dict[tuple[int, float], list[int]] = {}
        for c, a in _closed_entries(inst, routes, node).items():
            groups.setdefault((a[1], round(arrival_of[(c, a)], 9)), []).append(c)
        for (v, at), chunks in groups.items():
            worst = max(worst, at + group_spread_time(inst, chunks, v, node))
    return worst


def respread_groups(inst: RoutingInstance, routes: Routes, problem: ScheduleProblem, orders: Orders, *,
                    solver: str = "highs", lower: float | None = None, deadline: float | None = None,
                    max_solves: int = MAX_SPREAD_SOLVES, solve_seconds: float | None = None) -> Respread | None:
    """Try the inter-node group cuts of `pattern_trials` on the schedule (routes, problem, orders), most
    promising first by `cut_estimate`; for each, solve the spread of the last groups in every receiving
    node and splice it in. Returns the best schedule found if it beats the one given, else None.
    `lower` (a proven bound on every schedule) stops the search on reaching it; at `deadline` (a
    time.perf_counter() value) it stops and keeps what it has; `solve_seconds` caps each spread MILP."""
    timing = evaluate(problem, orders)
    best: tuple[Routes, ScheduleProblem, Orders, Timing] | None = None
    best_makespan = timing.makespan
    floor = 0.0 if lower is None else lower
    scored = []
    for k, (_, trial) in enumerate(pattern_trials(problem, orders, deadline=deadline)):
        try:
            trial_timing = evaluate(problem, trial)
        except ScheduleError:
            continue
        estimate = cut_estimate(inst, problem, trial_timing, routes)
        scored.append((round(estimate, 9), round(trial_timing.makespan, 9), k, trial, trial_timing))
    scored.sort(key=lambda item: item[:3])
    solves = tried = 0
    for estimate, _, _, trial, trial_timing in scored:
        if estimate >= best_makespan - 1e-6 * best_makespan or solves >= max_solves:
            break
        if best_makespan <= floor * (1 + 1e-6) + EPS:
            break
        if deadline is not None and time.perf_counter() >= deadline:
            break
        tried += 1
        spreads = _solve_nodes(inst, problem, trial_timing, routes, solver, best_makespan, floor, deadline,
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
                 upper: float, floor: float, deadline: float | None,
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
        left = _solve_limit(solver, deadline)
        if left is not None and left <= 0:
            break  # past the deadline (or too close to it for CBC to stop in time): the rest keep their trees
        if solve_seconds is not None:
            left = solve_seconds if left is None else min(left, solve_seconds)
        spread = solve_spread(sp, solver, upper=upper - EPS, lower=floor, time_limit=left)
        solved.append((sp, spread))
        out.append((sp, spread, True))
    return out


def _solve_limit(solver: str, deadline: float | None) -> float | None:
    # limit = deadline - now - grace (CBC's process is stopped up to CBC_STOP_GRACE + CBC_KILL_GRACE late)
    if deadline is None:
        return None
    grace = CBC_STOP_GRACE + CBC_KILL_GRACE if solver == "cbc" else 0.0
    return deadline - time.perf_counter() - grace


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
