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
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from collsynth.encodings.milp_bounds import group_spread_time
from collsynth.encodings.milp_instance import Arc, RoutingInstance, arc_adjacency, shortest_times
from collsynth.encodings.milp_model import CHOSEN, Lin, MilpModel, between
from collsynth.encodings.milp_ordering import ScheduleProblem, Timing
from collsynth.encodings.taccl_milp import Routes

INF = math.inf
MAX_SPREAD_CHUNKS = 8  # the most chunks one window re-routes (whole arrival groups, latest first)
MAX_SPREAD_SOLVES = 6  # the most group cuts whose spread is solved in one call
MAX_BINARIES = 6000  # a window whose model would need more ordering binaries is left alone
EPS = 1e-9
SPREAD_GAP = 1e-6  # relative MIP gap of a spread MILP: it stops within this of the least makespan

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


# --- the window of one node ----------------------------------------------------------------------

def inside(inst: RoutingInstance, node: int, a: Arc) -> bool:
    return inst.node_of(a[0]) == node and inst.node_of(a[1]) == node


def closed_entries(inst: RoutingInstance, routes: Routes, node: int) -> dict[int, Arc]:
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
    entries = closed_entries(inst, routes, node)
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
    budget_index = [i for i, res in enumerate(inst.resources) if any(inside(inst, node, a) for a in res.links)]
    budget_busy: list[list[Interval]] = [[] for _ in budget_index]
    for t, tr in enumerate(problem.transfers):
        if tr.chunk in moving and inside(inst, node, tr.arc):
            continue
        if timing.arrival[t] <= first + EPS:
            continue
        # a fixed transfer holds its link and budgets from its start to its group's arrival
        span = (timing.start[t], timing.arrival[t])
        if inside(inst, node, tr.arc):
            busy.setdefault(tr.arc, []).append(span)
        for j, r in enumerate(budget_index):
            if tr.arc in inst.resources[r].links:
                budget_busy[j].append(span)
    return SpreadProblem(
        node=node, chunks=tuple(chosen), entry=tuple(entries[c][1] for c in chosen),
        ready=tuple(arrival_of[(c, entries[c])] for c in chosen),
        targets=tuple(tuple(sorted(d for d in inst.chunks[c].targets if inst.node_of(d) == node and d != entries[c][1]))
                      for c in chosen),
        arcs_of=tuple(tuple(sorted(a for a in inst.chunks[c].arcs if inside(inst, node, a) and a[1] != entries[c][1]))
                      for c in chosen),
        cost=inst.link_cost, budgets=tuple(frozenset(a for a in inst.resources[r].links if inside(inst, node, a))
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
    result = model.solve(solver, time_limit=time_limit, gap=SPREAD_GAP)
    values = result.values
    if not result.has_solution or values is None or result.objective is None:
        return None
    trees = tuple(tuple(a for a in sp.arcs_of[i] if (i, a) in x and values[x[i, a]] > CHOSEN)
                  for i in range(len(sp.chunks)))
    starts = {(sp.chunks[i], a): float(values[s[i, a]]) for i in range(len(sp.chunks)) for a in trees[i]}
    return Spread(result.status, float(result.objective), trees, MappingProxyType(starts))


@dataclass(frozen=True)
class _Windows:
    """When each chunk can use each link (time windows), and which pairs of placements may collide."""

    dist: list[dict[int, float]]  # per chunk: shortest time from its entry over its links
    usable: list[tuple[Arc, ...]]  # per chunk: links it can cross and still finish by `upper`
    s_lo: dict[tuple[int, Arc], float]
    s_hi: dict[tuple[int, Arc], float]
    pairs: list[tuple[int, Arc, int, Arc]]  # placements sharing a link or budget whose windows overlap
    around: list[tuple[int, Arc, float, float]]  # placements whose window overlaps a fixed interval [b, e)


def _windows(sp: SpreadProblem, horizon: float) -> _Windows | None:
    n = len(sp.chunks)
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
    return _Windows(dist, usable, s_lo, s_hi, pairs, around)


def _spread_model(sp: SpreadProblem, upper: float,
                  lower: float) -> tuple[MilpModel, dict[tuple[int, Arc], int], dict[tuple[int, Arc], int]] | None:
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
    w = _windows(sp, upper)
    if w is None or len(w.pairs) + len(w.around) > MAX_BINARIES or max(lower, max(sp.ready)) > upper:
        return None
    m = MilpModel("spread")
    makespan = m.add_columns(1, lb=max(lower, max(sp.ready)), ub=upper, cost=1.0)[0]
    x: dict[tuple[int, Arc], int] = {}
    s: dict[tuple[int, Arc], int] = {}
    arrival: list[dict[int, int]] = []
    for i in range(len(sp.chunks)):
        t = _chunk_tree(m, sp, w, i, upper, makespan, x, s)
        if t is None:
            return None  # a target cannot be reached by `upper`
        arrival.append(t)
    _interchangeable(m, sp, arrival)
    _one_at_a_time(m, sp, w, x, s)
    _around_fixed(m, sp, w, x, s)
    return m, x, s


def _chunk_tree(m: MilpModel, sp: SpreadProblem, w: _Windows, i: int, horizon: float, makespan: int,
                x: dict[tuple[int, Arc], int], s: dict[tuple[int, Arc], int]) -> dict[int, int] | None:
    """Chunk i's columns (t_iv, x_ia, s_ia) and its rows: after_arrival, arrive, send_held, receive_once,
    makespan (formulas in `_spread_model`). Returns its arrival columns, or None if a target is unreachable."""
    dist, usable = w.dist[i], w.usable[i]
    ranks = sorted(v for v in dist if v == sp.entry[i] or any(a[1] == v for a in usable))
    if any(v not in ranks for v in sp.targets[i]):
        return None
    t = {v: m.add_columns(1, lb=sp.ready[i] + dist[v],
                          ub=sp.ready[i] if v == sp.entry[i] else max(horizon, sp.ready[i] + dist[v]))[0]
         for v in ranks}
    for a in usable:
        x[i, a] = m.add_binaries(1)[0]
        s[i, a] = m.add_columns(1, lb=w.s_lo[i, a], ub=w.s_hi[i, a])[0]
    for a in usable:
        u, v = a
        wait = horizon - w.s_lo[i, a]
        # s_ia >= t_iu - M (1 - x_ia)
        m.add_ge("after_arrival", Lin.of(s[i, a]), Lin.of(t[u]) + Lin.of(x[i, a], wait) - wait)
        gap = w.s_hi[i, a] + sp.cost[a] - (sp.ready[i] + dist[v])
        # t_iv >= s_ia + cost_a - M (1 - x_ia)
        m.add_ge("arrive", Lin.of(t[v]), Lin.of(s[i, a]) + Lin.of(x[i, a], gap) + (sp.cost[a] - gap))
        if u != sp.entry[i]:
            into = [x[i, b] for b in usable if b[1] == u]
            # x_i(u,v) <= sum_w x_i(w,u)
            m.add_le("send_held", Lin.of(x[i, a]), Lin.total(into))
    for v in ranks:
        if v == sp.entry[i]:
            continue
        into = [x[i, a] for a in usable if a[1] == v]
        need = v in sp.targets[i]
        # sum_u x_i(u,v) = 1 for targets, <= 1 otherwise
        m.add("receive_once", between(1.0 if need else 0.0, Lin.total(into), 1.0))
        if need:
            m.add_ge("makespan", Lin.of(makespan), Lin.of(t[v]))  # T >= t_iv
    return t


def _interchangeable(m: MilpModel, sp: SpreadProblem, arrival: list[dict[int, int]]) -> None:
    # t_iv0 <= t_jv0 for i < j with the same entry, time, targets and links
    for i, j in itertools.combinations(range(len(sp.chunks)), 2):
        if (sp.entry[i], sp.ready[i], sp.targets[i], sp.arcs_of[i]) == (sp.entry[j], sp.ready[j], sp.targets[j],
                                                                       sp.arcs_of[j]) and sp.targets[i]:
            first = sp.targets[i][0]
            m.add_ge("interchangeable", Lin.of(arrival[j][first]), Lin.of(arrival[i][first]))


def _one_at_a_time(m: MilpModel, sp: SpreadProblem, w: _Windows, x: dict[tuple[int, Arc], int],
                   s: dict[tuple[int, Arc], int]) -> None:
    # s_jb >= s_ia + cost_a - M1 (3 - y - x_ia - x_jb);  s_ia >= s_jb + cost_b - M2 (2 + y - x_ia - x_jb)
    for i, a, j, b in w.pairs:
        y = m.add_binaries(1)[0]
        m1 = w.s_hi[i, a] + sp.cost[a] - w.s_lo[j, b]
        m2 = w.s_hi[j, b] + sp.cost[b] - w.s_lo[i, a]
        m.add_ge("one_at_a_time", Lin.of(s[j, b]),
                 Lin.of(s[i, a]) + Lin({y: m1, x[i, a]: m1, x[j, b]: m1}) + (sp.cost[a] - 3 * m1))
        m.add_ge("one_at_a_time", Lin.of(s[i, a]),
                 Lin.of(s[j, b]) + Lin({y: -m2, x[i, a]: m2, x[j, b]: m2}) + (sp.cost[b] - 2 * m2))


def _around_fixed(m: MilpModel, sp: SpreadProblem, w: _Windows, x: dict[tuple[int, Arc], int],
                  s: dict[tuple[int, Arc], int]) -> None:
    # s_ia >= e - M (2 - z - x_ia),  s_ia + cost_a <= b + M (1 + z - x_ia)  for a fixed interval [b, e)
    for i, a, b, e in w.around:
        z = m.add_binaries(1)[0]
        after = e - w.s_lo[i, a]
        before = w.s_hi[i, a] + sp.cost[a] - b
        m.add_ge("around_fixed", Lin.of(s[i, a]), Lin({z: after, x[i, a]: after}) + (e - 2 * after))
        m.add_le("around_fixed", Lin.of(s[i, a]) + Lin.of(x[i, a], before),
                 Lin.of(z, before) + (b - sp.cost[a] + before))


# --- splicing a solved window into a schedule ------------------------------------------------------


# --- group cuts -----------------------------------------------------------------------------------


