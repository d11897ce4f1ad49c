"""Local search on routes: re-parent chunks on the critical path when that shortens the schedule.

The routing MILP ignores contention (it is a relaxation), so among its many optimal routings some
schedule better than others. After ordering, this search takes the transfers that arrive last, and
for each (chunk, destination) on their chains tries every other rank that could deliver the chunk
there (a link the sketch allows, not below the destination in the chunk's tree); a move is kept when
list scheduling of the new routes finishes earlier. The number of schedules tried is bounded, so the
search is deterministic and its cost predictable.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from collsynth.encodings.milp_instance import RoutingInstance
from collsynth.encodings.milp_ordering import RULES, Orders, ScheduleProblem, Timing, best_list_schedule
from collsynth.encodings.taccl_milp import Routes, RoutingError, check_routes, transfers_from_routes

CRITICAL_TRANSFERS = 6


@dataclass(frozen=True)
class Searched:
    routes: Routes
    problem: ScheduleProblem
    orders: Orders
    timing: Timing
    moves: int
    tried: int
    stopped: bool = False  # the deadline ended the search


def improve_routes(inst: RoutingInstance, routes: Routes, *, max_tries: int = 200,
                   rules: tuple[str, ...] = RULES, deadline: float | None = None) -> Searched:
    """First-improvement descent over single re-parenting moves (module docstring); stops early at
    `deadline` (a time.perf_counter() value), keeping the best routes found."""
    problem = transfers_from_routes(inst, routes)
    orders, timing, _ = best_list_schedule(problem, rules)
    tried = moves = 0
    improved = True
    while improved and tried < max_tries:
        if deadline is not None and time.perf_counter() >= deadline:
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
                if tried >= max_tries or (deadline is not None and time.perf_counter() >= deadline):
                    break
                tried += 1
                new_tree = tuple(sorted((a if a[1] != d else (u, d)) for a in tree))
                try:
                    candidate = check_routes(inst, Routes(routes.trees[:c] + (new_tree,) + routes.trees[c + 1:]))
                except RoutingError:
                    continue
                cand_problem = transfers_from_routes(inst, candidate)
                cand_orders, cand_timing, _ = best_list_schedule(cand_problem, rules)
                if cand_timing.makespan < timing.makespan - 1e-9:
                    routes, problem, orders, timing = candidate, cand_problem, cand_orders, cand_timing
                    moves += 1
                    improved = True
                    break
            if improved or tried >= max_tries or (deadline is not None and time.perf_counter() >= deadline):
                break
    stopped = deadline is not None and time.perf_counter() >= deadline
    return Searched(routes, problem, orders, timing, moves, tried, stopped)


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
