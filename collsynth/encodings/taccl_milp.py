"""TACCL-style MILP encodings, written for open-source solvers (CBC, HiGHS).

Two models (plus the greedy ordering between them, `milp_ordering.py`):

1. Routing (`build_routing_model`): which links each chunk crosses. Binary x[c,a] for the links a
   chunk may use (no variables for links the sketch forbids); per destination a unit path flow
   f[c,d,a] <= x[c,a] whose length bounds the makespan T. This multi-commodity-flow form needs no
   big-M and its LP relaxation is tight: T is bounded by path lengths, by link and switch/NIC loads
   with release times (for each h, the chunks that cannot reach the link before h all cross it after h,
   one at a time, then still need their tail) and by a port's fan-out after a chunk arrives. Symmetric
   (chunk, link) pairs share one variable and only one representative per orbit gets rows, so the
   model shrinks by the order of the symmetry group. A switch sketch's few/many-connections wish is a
   second, lexicographic objective (distinct links, with T held at its optimum).
   The optimum is a lower bound on every schedule the sketch allows (no contention is modelled).
2. Scheduling (`milp_schedule_model.build_schedule_model`): exact start times for fixed routes and fixed orders on links
   and budgets, and which consecutive inter-node transfers go together (binary g) to pay alpha once.
   Without inter-node links it is an LP. Its big-M is the makespan of the heuristic schedule (a valid
   upper bound on every start time), never a fixed 1e7.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType

import numpy as np

from collsynth.core.errors import CollsynthError
from collsynth.encodings.milp_instance import Arc, RoutingInstance, shortest_times
from collsynth.encodings.milp_model import CHOSEN, INF, Lin, MilpModel
from collsynth.encodings.milp_ordering import COPY, ScheduleProblem, Transfer
from collsynth.topologies.symmetry import orbits

# release-time rows per link / budget (see _release_subsets)
MAX_RELEASE_ROWS = 6


XCols = Mapping[tuple[int, Arc], int]  # (chunk, link) -> x column
FlowCols = dict[tuple[int, int, Arc], int]  # (chunk, target, link) -> f column
Times = Mapping[tuple[int, Arc], float]  # (chunk, link) -> earliest start there (head) / least time after (tail)
BoundMakespan = Callable[[str, Lin[int]], None]  # (family, expr): adds the row expr <= T


class RoutingError(CollsynthError):
    """Routes that do not deliver every chunk (a solver answer that fails our own check)."""


@dataclass(frozen=True)
class Routes:
    """Per chunk, the links it crosses: a tree from its sources reaching all of its targets."""
    trees: tuple[tuple[Arc, ...], ...]


def check_routes(inst: RoutingInstance, routes: Routes) -> Routes:
    """Prune links that lead to no target and check every target is reached exactly once."""
    pruned = []
    for c, tree in enumerate(routes.trees):
        info = inst.chunks[c]
        parent: dict[int, int] = {}
        for u, v in tree:
            if v in parent:
                raise RoutingError(f"chunk {c} reaches rank {v} twice (from {parent[v]} and {u})")
            parent[v] = u
        keep: set[Arc] = set()
        for d in info.targets:
            v, hops = d, 0
            while v not in info.sources:
                if v not in parent or hops > len(tree):
                    raise RoutingError(f"chunk {c} never reaches rank {d}")
                keep.add((parent[v], v))
                v, hops = parent[v], hops + 1
        pruned.append(tuple(sorted(keep)))
    return Routes(tuple(pruned))


# --- 1. routing model -------------------------------------------------------------------------

@dataclass(frozen=True)
class RoutingModel:
    model: MilpModel
    x_col: Mapping[tuple[int, Arc], int]  # (chunk, link) -> column (shared within a symmetry orbit)
    flow_col: Mapping[tuple[int, int, Arc], int]  # (chunk, target, link) -> column, representative chunks
    used_col: Mapping[Arc, int]  # groupable link used at all
    unique_col: Mapping[Arc, int]
    makespan_col: int
    makespan_rows: tuple[int, ...]  # rows of the form expr - T <= 0
    unique_orbits: Mapping[int, int]  # distinct-link column (one per symmetry orbit of links) -> orbit size


def set_makespan_objective(rm: RoutingModel) -> None:
    """Objective: minimize T (the first, lexicographically dominant, routing objective)."""
    rm.model.set_cost(rm.makespan_col, 1.0)
    for col in rm.unique_orbits:
        rm.model.set_cost(col, 0.0)


def set_connections_objective(rm: RoutingModel, policy: str, makespan: float) -> None:
    """Objective: fewest (policy "min") or most ("max") distinct switch links, keeping T <= makespan."""
    rm.model.set_cost(rm.makespan_col, 0.0)
    rm.model.set_bounds(rm.makespan_col, 0.0, makespan)
    sign = 1.0 if policy == "min" else -1.0
    for col, size in rm.unique_orbits.items():
        rm.model.set_cost(col, sign * size)


def build_routing_model(inst: RoutingInstance, *, upper_bound: float | None = None) -> RoutingModel:
    """The routing MILP (module docstring, 1)."""
    model = MilpModel(f"route_{inst.collective.name}_{inst.topology.name}")
    sym = inst.symmetry
    pairs = [(c, a) for c, ch in enumerate(inst.chunks) for a in ch.arcs]
    reps = orbits(pairs, [partial(_move_pair, inst, g) for g in range(sym.order)])
    rep_col: dict[tuple[int, Arc], int] = {}
    x_col: dict[tuple[int, Arc], int] = {}
    for pair in pairs:
        r = reps[pair]
        if r not in rep_col:
            rep_col[r] = model.add_binaries(1)[0]
        x_col[pair] = rep_col[r]
    makespan = model.add_columns(1, lb=0.0, ub=upper_bound if upper_bound is not None else INF, cost=1.0)[0]
    chunk_reps = sorted({min(sym.chunk_perms[g][c] for g in range(sym.order)) for c in range(len(inst.chunks))})
    arcs = sorted({a for ch in inst.chunks for a in ch.arcs})
    arc_rep = orbits(arcs, [partial(sym.map_arc, g) for g in range(sym.order)])
    rep_arcs = [a for a in arcs if arc_rep[a] == a]
    makespan_rows: list[int] = []

    def bound_makespan(family: str, expr: Lin[int]) -> None:
        # expr <= T
        makespan_rows.append(model.add_le(family, expr, Lin.of(makespan)))

    _receive_once(model, inst, x_col, chunk_reps)
    _send_only_held(model, inst, x_col, chunk_reps)
    flow_col = _path_flows(model, inst, x_col, chunk_reps, bound_makespan)
    head, tail = _head_tail(inst)
    used_col = _link_load(model, inst, x_col, rep_arcs, head, tail, bound_makespan)
    _budget_load(model, inst, x_col, used_col, head, tail, bound_makespan)
    _fanout_after_arrival(model, inst, x_col, flow_col, chunk_reps, bound_makespan)
    unique_col, orbit_sizes = _unique_links(model, inst, x_col, flow_col, chunk_reps)
    return RoutingModel(model, MappingProxyType(x_col), MappingProxyType(flow_col), MappingProxyType(used_col),
                        MappingProxyType(unique_col), makespan, tuple(makespan_rows), MappingProxyType(orbit_sizes))


def _move_pair(inst: RoutingInstance, g: int, pair: tuple[int, Arc]) -> tuple[int, Arc]:
    """The image of (chunk, link) under the instance's symmetry g."""
    return inst.symmetry.chunk_perms[g][pair[0]], inst.symmetry.map_arc(g, pair[1])


def _receive_once(model: MilpModel, inst: RoutingInstance, x_col: XCols, chunk_reps: list[int]) -> None:
    # sum_{a into d} x[c,a] = 1 for each target d of c; <= 1 for ranks that only relay c
    for c in chunk_reps:
        ch = inst.chunks[c]
        into: dict[int, list[int]] = {}
        for a in ch.arcs:
            into.setdefault(a[1], []).append(x_col[(c, a)])
        targets = set(ch.targets)
        for v, cols in into.items():
            if v in targets:
                model.add_eq("receive_once", Lin.total(cols), 1.0)
            elif len(cols) > 1:
                model.add_le("relay_receives_once", Lin.total(cols), 1.0)


def _send_only_held(model: MilpModel, inst: RoutingInstance, x_col: XCols, chunk_reps: list[int]) -> None:
    # x[c,(u,v)] <= sum_{a into u} x[c,a] for u not a source of c
    for c in chunk_reps:
        ch = inst.chunks[c]
        into: dict[int, list[int]] = {}
        for a in ch.arcs:
            into.setdefault(a[1], []).append(x_col[(c, a)])
        sources = set(ch.sources)
        for a in ch.arcs:
            u = a[0]
            if u in sources:
                continue
            model.add_le("send_only_held", Lin.of(x_col[(c, a)]), Lin.total(into.get(u, [])))


def _path_flows(model: MilpModel, inst: RoutingInstance, x_col: XCols, chunk_reps: list[int],
                bound_makespan: BoundMakespan) -> FlowCols:
    # in_f(v) - out_f(v) = [v == d] at non-sources; f[c,d,a] <= x[c,a]; sum_a cost_a f[c,d,a] <= T
    flow_col: dict[tuple[int, int, Arc], int] = {}
    for c in chunk_reps:
        ch = inst.chunks[c]
        sources = set(ch.sources)
        for d in ch.targets:
            arcs = ch.paths_to[d]
            cols = model.add_columns(len(arcs), lb=0.0, ub=1.0)
            balance: dict[int, Lin] = {}  # v -> in_f(v) - out_f(v)
            for col, a in zip(cols, arcs, strict=True):
                flow_col[(c, d, a)] = col
                model.add_le("flow_within_route", Lin.of(col), Lin.of(x_col[(c, a)]))
                for v, sign in ((a[1], 1.0), (a[0], -1.0)):
                    if v not in sources:
                        balance[v] = balance.get(v, Lin({})) + Lin.of(col, sign)
            for v, net in balance.items():
                model.add_eq("flow_conservation", net, 1.0 if v == d else 0.0)
            arrival = Lin.weighted((col, inst.link_cost[a]) for col, a in zip(cols, arcs, strict=True))
            bound_makespan("arrival_before_makespan", arrival)
    return flow_col


def _head_tail(inst: RoutingInstance) -> tuple[dict[tuple[int, Arc], float], dict[tuple[int, Arc], float]]:
    """Per (chunk, link): the earliest the chunk can be at the link's source (head: its shortest time
    there), and the least time it still needs after crossing (tail; > 0 only for a link that is the
    chunk's only way into the destination's node, which must then reach that node's targets from there)."""
    head: dict[tuple[int, Arc], float] = {}
    tail: dict[tuple[int, Arc], float] = {}
    for c, ch in enumerate(inst.chunks):
        out: dict[int, list[tuple[int, float]]] = {}
        for a in ch.arcs:
            out.setdefault(a[0], []).append((a[1], inst.link_cost[a]))
        dist = shortest_times(out, ch.sources)
        entries: dict[int, set[int]] = {}
        for u, v in ch.arcs:
            if inst.node_of(u) != inst.node_of(v):
                entries.setdefault(inst.node_of(v), set()).add(v)
        for a in ch.arcs:
            head[(c, a)] = dist.get(a[0], INF)
            t = 0.0
            node = inst.node_of(a[1])
            if inst.node_of(a[0]) != node and entries.get(node) == {a[1]}:
                from_entry = shortest_times(out, (a[1],))
                t = max((from_entry.get(d, 0.0) for d in ch.targets if inst.node_of(d) == node), default=0.0)
            tail[(c, a)] = t
    return head, tail


def _release_subsets(jobs: list[tuple[float, float, int, float]],
                     limit: int = MAX_RELEASE_ROWS) -> Iterator[tuple[Lin[int], int]]:
    """For jobs (head, tail, column, time) sharing one link or budget: the subsets "every job released at or
    after h", for up to `limit` thresholds h. Each yields (h + sum_j time_j x_j + least tail, how many jobs):
    such jobs all start after h and run one at a time, so that expression is a lower bound on T."""
    heads = sorted({h for h, *_ in jobs})
    if len(heads) > limit:
        heads = [heads[round(i * (len(heads) - 1) / (limit - 1))] for i in range(limit)]
    for h in heads:
        members = [j for j in jobs if j[0] >= h]
        least_tail = min(j[1] for j in members)
        yield Lin.weighted((col, time) for _, _, col, time in members) + (h + least_tail), len(members)


def _link_load(model: MilpModel, inst: RoutingInstance, x_col: XCols, rep_arcs: list[Arc], head: Times,
               tail: Times, bound_makespan: BoundMakespan) -> dict[Arc, int]:
    # for each release time h of the chunks that may cross l: h + sum_{c: head_c >= h} cost_l x[c,l] + tail <= T;
    # inter-node links, whose chunks may go K at a time, use alpha_l / K + beta_l per chunk, and also
    # head + alpha_l used_l + beta_l sum_c x[c,l] + tail <= T with used_l >= x[c,l]
    sym = inst.symmetry
    users: dict[Arc, list[tuple[int, int]]] = {}
    for (c, a), col in x_col.items():
        users.setdefault(a, []).append((c, col))
    used_col: dict[Arc, int] = {}
    for a in rep_arcs:
        pairs = users.get(a, [])
        if not pairs:
            continue
        grouped = a in inst.groupable
        per_chunk = inst.link_alpha[a] / max(1, inst.max_together) + inst.link_beta[a] if grouped \
            else inst.link_cost[a]
        jobs = [(head[(c, a)], tail[(c, a)], col, per_chunk) for c, col in pairs]
        for finish, count in _release_subsets(jobs):
            if count > 1 or finish.const > 0:
                bound_makespan("link_load", finish)
        if grouped:
            used = model.add_columns(1, lb=0.0, ub=1.0)[0]
            for g in range(sym.order):
                used_col[sym.map_arc(g, a)] = used
            for col in {col for _, col in pairs}:
                model.add_le("link_used", Lin.of(col), Lin.of(used))
            release = min(head[(c, a)] for c, _ in pairs) + min(tail[(c, a)] for c, _ in pairs)
            transfer = Lin.of(used, inst.link_alpha[a]) + Lin.total((col for _, col in pairs), inst.link_beta[a])
            bound_makespan("link_load_alpha_once", transfer + release)
    return used_col


def _budget_load(model: MilpModel, inst: RoutingInstance, x_col: XCols, used_col: Mapping[Arc, int], head: Times,
                 tail: Times, bound_makespan: BoundMakespan) -> None:
    # as link_load, over all links of a switch port / NIC S: h + sum_{l in S} sum_{c: head >= h} cost x + tail <= T
    users: dict[Arc, list[tuple[int, int]]] = {}
    for (c, a), col in x_col.items():
        users.setdefault(a, []).append((c, col))
    seen: set[tuple] = set()
    for res in inst.resources:
        jobs = []
        for a in sorted(res.links):
            grouped = a in inst.groupable
            per_chunk = inst.link_alpha[a] / max(1, inst.max_together) + inst.link_beta[a] if grouped \
                else inst.link_cost[a]
            jobs += [(head[(c, a)], tail[(c, a)], col, per_chunk) for c, col in users.get(a, [])]
        if len(jobs) < 2:
            continue
        key = tuple(sorted(jobs))
        if key in seen:
            continue
        seen.add(key)
        for finish, count in _release_subsets(jobs):
            if count > 1:
                bound_makespan("budget_load", finish)


def _fanout_after_arrival(model: MilpModel, inst: RoutingInstance, x_col: XCols, flow_col: FlowCols,
                          chunk_reps: list[int], bound_makespan: BoundMakespan) -> None:
    # arrival(c,u) + sum_{(u,v) in S} cost x[c,(u,v)] <= T for each out-port S of a rank u that receives c
    out_ports: dict[int, list] = {}
    for res in inst.resources:
        if res.port == "out" and res.rank is not None:
            out_ports.setdefault(res.rank, []).append(res)
    for c in chunk_reps:
        ch = inst.chunks[c]
        arcs_from: dict[int, list[Arc]] = {}
        for a in ch.arcs:
            arcs_from.setdefault(a[0], []).append(a)
        for u in ch.targets:
            for res in out_ports.get(u, ()):
                sends = [a for a in arcs_from.get(u, ()) if a in res.links]
                if len(sends) < 2:
                    continue
                arrival = Lin.weighted((flow_col[(c, u, a)], inst.link_cost[a]) for a in ch.paths_to[u])
                fanout = Lin.weighted((x_col[(c, a)], inst.link_cost[a]) for a in sends)
                bound_makespan("fanout_after_arrival", arrival + fanout)


def _unique_links(model: MilpModel, inst: RoutingInstance, x_col: XCols, flow_col: FlowCols,
                  chunk_reps: list[int]) -> tuple[dict[Arc, int], dict[int, int]]:
    # min: u_o >= x[c,l] for l in link orbit o;  max: u_o <= sum_c x[c,l], and x[c,a] <= sum_d f[c,d,a]
    # so that no link is used just to be counted. One u per symmetry orbit of links (the routes are
    # symmetric, so are the links they use); the objective on them is set by set_connections_objective.
    if inst.unique_policy is None:
        return {}, {}
    sym = inst.symmetry
    users: dict[Arc, list[int]] = {}
    for (_c, a), col in x_col.items():
        if a in inst.unique_links:
            users.setdefault(a, []).append(col)
    links = sorted(users)
    link_rep = orbits(links, [partial(sym.map_arc, g) for g in range(sym.order)])
    orbit_size: dict[Arc, int] = {}
    for r in link_rep.values():
        orbit_size[r] = orbit_size.get(r, 0) + 1
    unique_col: dict[Arc, int] = {}
    orbit_col: dict[Arc, int] = {}
    for a in links:
        r = link_rep[a]
        if r not in orbit_col:
            orbit_col[r] = model.add_columns(1, lb=0.0, ub=1.0, integer=True)[0]
        unique_col[a] = orbit_col[r]
    for a in links:
        if link_rep[a] != a:
            continue
        u = orbit_col[a]
        if inst.unique_policy == "min":
            for col in sorted(set(users[a])):
                model.add_le("unique_link_used", Lin.of(col), Lin.of(u))
        else:
            model.add_le("unique_link_counted", Lin.of(u), Lin.total(sorted(set(users[a]))))
    if inst.unique_policy == "max":
        for c in chunk_reps:
            ch = inst.chunks[c]
            for a in ch.arcs:
                flows = [flow_col[(c, d, a)] for d in ch.targets if (c, d, a) in flow_col]
                model.add_le("no_stray_links", Lin.of(x_col[(c, a)]), Lin.total(flows))
    return unique_col, {orbit_col[r]: orbit_size[r] for r in orbit_col}


def routing_start(inst: RoutingInstance, rm: RoutingModel, routes: Routes) -> np.ndarray:
    """A feasible point of the routing model from routes that respect the symmetry."""
    x = np.zeros(rm.model.num_columns)
    for c, tree in enumerate(routes.trees):
        for a in tree:
            x[rm.x_col[(c, a)]] = 1.0
    parent = [{v: u for u, v in tree} for tree in routes.trees]
    for (c, d, a), col in rm.flow_col.items():
        v = d
        on_path = False
        sources = set(inst.chunks[c].sources)
        while v not in sources:
            u = parent[c][v]
            if (u, v) == a:
                on_path = True
                break
            v = u
        x[col] = 1.0 if on_path else 0.0
    for a, col in rm.used_col.items():
        x[col] = 1.0 if any(a in tree for tree in routes.trees) else 0.0
    for a, col in rm.unique_col.items():
        x[col] = 1.0 if any(a in tree for tree in routes.trees) else 0.0
    act = rm.model.activities(x)
    # rows read const + expr - T <= 0, stored as expr - T <= -const
    x[rm.makespan_col] = max((act[r] - rm.model.row_upper(r) for r in rm.makespan_rows), default=0.0)
    return x


def routes_from_solution(inst: RoutingInstance, rm: RoutingModel, values: np.ndarray) -> Routes:
    trees = []
    for c, ch in enumerate(inst.chunks):
        trees.append(tuple(a for a in ch.arcs if values[rm.x_col[(c, a)]] > CHOSEN))
    return check_routes(inst, Routes(tuple(trees)))


def min_links_lower_bound(inst: RoutingInstance) -> int:
    """Fewest distinct few-connections switch links any routing needs: every rank that can receive some
    chunk only over such links needs at least one of them coming in."""
    needy: set[int] = set()
    for ch in inst.chunks:
        into: dict[int, list[Arc]] = {}
        for a in ch.arcs:
            into.setdefault(a[1], []).append(a)
        for d in ch.targets:
            if d not in needy and into.get(d) and all(a in inst.unique_links for a in into[d]):
                needy.add(d)
    return len(needy)


def distinct_links(rm: RoutingModel, values: np.ndarray) -> int:
    """Distinct switch links in use (for the few/many-connections policies)."""
    return int(round(sum(size * values[col] for col, size in rm.unique_orbits.items())))


# --- transfers from routes ---------------------------------------------------------------------

def transfers_from_routes(inst: RoutingInstance, routes: Routes) -> ScheduleProblem:
    """One transfer per (chunk, link) of the routes; each waits for the transfer that brought the chunk."""
    transfers: list[Transfer] = []
    link_class: dict[int, int] = {}
    senders_first = inst.sketch.senders_first
    for c, tree in enumerate(routes.trees):
        order = _tree_order(inst.chunks[c].sources, tree)
        index: dict[int, int] = {}
        for u, v in order:
            deps = (index[u],) if u in index else ()
            index[v] = len(transfers)
            if senders_first and (u, v) in inst.groupable:
                link_class[len(transfers)] = 0 if u in inst.chunks[c].sources else 1
            transfers.append(Transfer(c, u, v, COPY, deps))
    return ScheduleProblem(tuple(transfers), inst.link_alpha, inst.link_beta,
                           tuple(res.links for res in inst.resources), inst.groupable, inst.max_together,
                           MappingProxyType(link_class))


def _tree_order(sources: tuple[int, ...], tree: tuple[Arc, ...]) -> list[Arc]:
    """Tree links parents first."""
    children: dict[int, list[int]] = {}
    for u, v in tree:
        children.setdefault(u, []).append(v)
    order: list[Arc] = []
    stack = list(sources)
    while stack:
        u = stack.pop()
        for v in sorted(children.get(u, ())):
            order.append((u, v))
            stack.append(v)
    return order
