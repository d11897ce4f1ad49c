"""Routing heuristics: greedy shortest-time / congestion-aware / fan-out trees per chunk (the routing MILP's
warm starts and fallbacks), and local search that re-parents chunks on the critical path.

The routing MILP ignores contention (it is a relaxation), so among its many optimal routings some
schedule better than others. After ordering, `improve_routes` takes the transfers that arrive last, and
for each (chunk, destination) on their chains tries every other rank that could deliver the chunk
there (a link the sketch allows, not below the destination in the chunk's tree); a move is kept when
list scheduling of the new routes finishes earlier. The number of schedules tried is bounded, so the
search is deterministic and its cost predictable."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from collsynth.encodings.milp_instance import Arc, RoutingInstance
from collsynth.encodings.milp_ordering import Orders, ScheduleProblem, Timing
from collsynth.encodings.taccl_milp import Routes, RoutingError, check_routes, transfers_from_routes
from collsynth.synth.milp.ordering import RULES, TIE_US, Stop, best_list_schedule, never

CRITICAL_TRANSFERS = 6  # the latest-arriving transfers whose chains the local search re-parents
# congestion-aware trees: a re-timed heap entry later than its key by more than this (us) is pushed back
DIJKSTRA_TIE_US = 1e-12


def ring_links(inst: RoutingInstance) -> frozenset[Arc]:
    """For switches that ask for few connections: a ring over each switch's ranks (in the sketch's order),
    the fewest links that let every rank reach every other."""
    gpus = inst.gpus_per_node
    ring: set[Arc] = set()
    for sw in inst.sketch.switches:
        if sw.connections != "min":
            continue
        for node in range(inst.sketch.num_nodes):
            ranks = [node * gpus + r for r in sw.ranks]
            ring.update((a, b) for a, b in zip(ranks, ranks[1:] + ranks[:1], strict=True))
    return frozenset(ring)


def heuristic_routes(inst: RoutingInstance, prefer: frozenset[Arc] | None = None, *,
                     congestion: bool = False, min_hops: bool = False, fanout: bool = False) -> tuple[Routes, bool]:
    """Greedy trees, one chunk per symmetry orbit at a time, mapped onto the rest of the orbit.

    Each tree is a shortest-time tree. Without `congestion` a link costs its transfer time (ties go to
    lightly loaded links); with it, a link is also busy for the load that earlier trees (and this tree's
    settled links) put on it and on its switch ports/NICs, so later chunks avoid crowded links. With
    `prefer`, links of the sketch's few-connections switches are used only if they are in `prefer`
    (when that still reaches every target). With `min_hops`, chunks move along minimum-hop paths only.
    With `fanout`, each tree is instead a greedy broadcast that counts its own sends one at a time on
    every link and budget (a rank behind one switch port informs one rank per transfer time, so a
    chunk that reaches a node late spreads there by doubling rather than from one rank to all).
    Returns (routes, symmetric): whether the routes respect the sketch's symmetry (so they can
    warm-start the routing MILP)."""
    sym = inst.symmetry
    load: dict[tuple[str, object], float] = {}
    trees: list[tuple[Arc, ...] | None] = [None] * len(inst.chunks)
    symmetric = True
    for c in range(len(inst.chunks)):
        if trees[c] is not None:
            continue
        tree = None
        hops = set(inst.chunks[c].hop_arcs) if min_hops else None
        if fanout:
            tree = _broadcast_tree(inst, c)
        if tree is None and prefer is not None:
            tree = _dijkstra_tree(inst, c, load, congestion, lambda a: a in prefer or a not in inst.unique_links)
        if tree is None and hops is not None:
            tree = _dijkstra_tree(inst, c, load, congestion, hops.__contains__)
        if tree is None:
            tree = _dijkstra_tree(inst, c, load, congestion)
        assert tree is not None  # build_instance checked that every target is reachable
        for g in range(sym.order):
            image = sym.chunk_perms[g][c]
            mapped = tuple(sorted(sym.map_arc(g, a) for a in tree))
            if trees[image] is None:
                trees[image] = mapped
                for a in mapped:
                    _add_load(inst, load, a)
            elif trees[image] != mapped:
                symmetric = False
    return Routes(tuple(t or () for t in trees)), symmetric


def _add_load(inst: RoutingInstance, load: dict, a: Arc) -> None:
    cost = inst.link_cost[a]
    load[("link", a)] = load.get(("link", a), 0.0) + cost
    for r in inst.resources_of.get(a, ()):
        load[("budget", r)] = load.get(("budget", r), 0.0) + cost


def _busy(inst: RoutingInstance, load: Mapping, a: Arc) -> float:
    busy = load.get(("link", a), 0.0)
    for r in inst.resources_of.get(a, ()):
        busy = max(busy, load.get(("budget", r), 0.0))
    return busy


def _dijkstra_tree(inst: RoutingInstance, c: int, load: Mapping[Any, float], congestion: bool,
                   allowed: Callable[[Arc], bool] | None = None) -> tuple[Arc, ...] | None:
    routes = inst.chunks[c]
    out: dict[int, list[int]] = {}
    for u, v in routes.arcs:
        if allowed is None or allowed((u, v)):
            out.setdefault(u, []).append(v)
    local = dict(load)  # this tree's own settled links count too
    best: dict[int, tuple[float, float]] = {s: (0.0, 0.0) for s in routes.sources}
    parent: dict[int, int] = {}
    heap: list[tuple[float, float, int, int]] = [(0.0, 0.0, s, -1) for s in routes.sources]
    done: set[int] = set()
    while heap:
        t, l, u, via = heapq.heappop(heap)
        if u in done:
            continue
        if via >= 0 and congestion:
            # the link may have become busier since this entry was pushed: re-time it (times only grow)
            again = max(best[via][0], _busy(inst, local, (via, u))) + inst.link_cost[(via, u)]
            if again > t + DIJKSTRA_TIE_US:
                heapq.heappush(heap, (again, l, u, via))
                continue
        done.add(u)
        if via >= 0:
            parent[u] = via
            best[u] = (t, l)
            if congestion:
                _add_load(inst, local, (via, u))
        for v in out.get(u, ()):
            if v in done:
                continue
            a = (u, v)
            busy = _busy(inst, local, a)
            begin = max(t, busy) if congestion else t
            heapq.heappush(heap, (begin + inst.link_cost[a], l + busy, v, u))
    arcs: set[Arc] = set()
    if any(d not in best for d in routes.targets):
        return None
    for d in routes.targets:
        v = d
        while v not in routes.sources:
            u = parent[v]
            if (u, v) in arcs:
                break
            arcs.add((u, v))
            v = u
    return tuple(sorted(arcs))


def _broadcast_tree(inst: RoutingInstance, c: int) -> tuple[Arc, ...] | None:
    """Greedy broadcast of chunk c: repeatedly the send that completes first, given that this chunk's own
    earlier sends keep their links and budgets busy (ties: targets first, then lowest ranks)."""
    routes = inst.chunks[c]
    out: dict[int, list[Arc]] = {}
    for a in routes.arcs:
        out.setdefault(a[0], []).append(a)
    targets = set(routes.targets)
    ready = {s: 0.0 for s in routes.sources}
    free: dict[object, float] = {}
    parent: dict[int, int] = {}
    while not targets <= ready.keys():
        best = None
        for u in sorted(ready):
            for a in out.get(u, ()):
                if a[1] in ready:
                    continue
                keys = [("link", a)] + [("budget", r) for r in inst.resources_of.get(a, ())]
                begin = max([ready[u]] + [free.get(k, 0.0) for k in keys])
                cand = (begin + inst.link_cost[a], a[1] not in targets, a[1], u)
                if best is None or cand < best[0]:
                    best = (cand, a, keys, begin)
        if best is None:
            return None
        (done, _, v, u), a, keys, _ = best
        ready[v] = done
        parent[v] = u
        for k in keys:
            free[k] = done
    arcs: set[Arc] = set()
    for d in routes.targets:
        v = d
        while v not in routes.sources and (parent[v], v) not in arcs:
            arcs.add((parent[v], v))
            v = parent[v]
    return tuple(sorted(arcs))


@dataclass(frozen=True)
class Searched:
    routes: Routes
    problem: ScheduleProblem
    orders: Orders
    timing: Timing
    moves: int
    tried: int
    stopped: bool = False  # the stage's clock ended the search


def improve_routes(inst: RoutingInstance, routes: Routes, *, max_tries: int = 200,
                   rules: tuple[str, ...] = RULES, stop: Stop = never) -> Searched:
    """First-improvement descent over single re-parenting moves (module docstring); stops early when `stop()`
    says so (asked before every move tried), keeping the best routes found."""
    problem = transfers_from_routes(inst, routes)
    orders, timing, _ = best_list_schedule(problem, rules, stop=stop)
    tried = moves = 0
    improved = True
    while improved and tried < max_tries:
        if stop():
            return Searched(routes, problem, orders, timing, moves, tried, stopped=True)
        improved = False
        for c, d in _critical_pairs(problem, timing, routes):
            tree = routes.trees[c]
            parent = {v: u for u, v in tree}
            below = _subtree(tree, d)
            holders = set(inst.chunks[c].sources) | set(parent)
            for u, v in inst.chunks[c].arcs:
                if v != d or u == parent.get(d) or u in below or u not in holders:
                    continue
                if tried >= max_tries or stop():
                    break
                tried += 1
                new_tree = tuple(sorted((a if a[1] != d else (u, d)) for a in tree))
                try:
                    candidate = check_routes(inst, Routes(routes.trees[:c] + (new_tree,) + routes.trees[c + 1:]))
                except RoutingError:
                    continue
                cand_problem = transfers_from_routes(inst, candidate)
                cand_orders, cand_timing, _ = best_list_schedule(cand_problem, rules, stop=stop)
                if cand_timing.makespan < timing.makespan - TIE_US:
                    routes, problem, orders, timing = candidate, cand_problem, cand_orders, cand_timing
                    moves += 1
                    improved = True
                    break
            if improved or tried >= max_tries or stop():
                break
    return Searched(routes, problem, orders, timing, moves, tried, stop())


def _critical_pairs(problem: ScheduleProblem, timing: Timing, routes: Routes) -> list[tuple[int, int]]:
    """(chunk, destination) along the chains of the last-arriving transfers, latest first."""
    latest = sorted(range(len(problem.transfers)), key=lambda t: (-timing.arrival[t], t))[:CRITICAL_TRANSFERS]
    pairs: list[tuple[int, int]] = []
    for t in latest:
        while True:
            tr = problem.transfers[t]
            if (tr.chunk, tr.dst) not in pairs:
                pairs.append((tr.chunk, tr.dst))
            if not tr.deps:
                break
            t = tr.deps[0]
    return pairs


def _subtree(tree: tuple[tuple[int, int], ...], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for u, v in tree:
        children.setdefault(u, []).append(v)
    seen = {root}
    stack = [root]
    while stack:
        for v in children.get(stack.pop(), ()):
            if v not in seen:
                seen.add(v)
                stack.append(v)
    return seen
