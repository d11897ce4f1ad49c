"""Ordering heuristics for a routed schedule: list scheduling under priority rules, greedy and pattern joins
of inter-node transfers, and re-listing around chosen groups. The schedule problem they order (transfers,
orders, exact timing) is `collsynth.encodings.milp_ordering`."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from collsynth.encodings.milp_instance import Arc
from collsynth.encodings.milp_ordering import (
    NOT_QUEUED,
    Orders,
    ScheduleError,
    ScheduleProblem,
    Timing,
    Transfer,
    evaluate,
    join_candidates,
)

# two makespans closer than this are equal (us): a heuristic keeps a new schedule only when it is shorter
# by more (MilpParameters.tie_us defaults to it)
TIE_US = 1e-9
RULES = ("longest-remaining", "earliest-start", "longest-remaining-far", "earliest-start-far")

Stop = Callable[[], bool]  # asked between the steps of a long search: True = stop now and keep what you have


def never() -> bool:
    """The `Stop` of a search without a budget."""
    return False


SecondsLeft = Callable[[], float | None]  # solver seconds a stage may still give a MILP (None: no limit)


def unlimited() -> float | None:
    """The `SecondsLeft` of a search without a budget."""
    return None


class _ListScheduler:
    """The state of one list-scheduling pass (`list_schedule`): when each link, budget and transfer is free,
    the queues built so far, and the ready transfers by priority."""

    def __init__(self, problem: ScheduleProblem, rule: str) -> None:
        self.problem = problem
        n = len(problem.transfers)
        self.tail = problem.remaining
        self.ranks = 1 + max((max(tr.src, tr.dst) for tr in problem.transfers), default=0)
        self.arrival = [0.0] * n
        self.waiting = [len(tr.deps) for tr in problem.transfers]
        self.link_free: dict[Arc, float] = {}
        self.res_free = [0.0] * len(problem.resources)
        self.link_seq: dict[Arc, list[int]] = {}
        self.res_seq: list[list[int]] = [[] for _ in problem.resources]
        self.top_class = 1 + max(problem.link_class.values(), default=0)
        # senders-first classes: a transfer waits for lower classes on its link
        self.pending_lower: dict[tuple[Arc, int], int] = {}
        for t, k in problem.link_class.items():
            arc = problem.transfers[t].arc
            for other in range(k + 1, self.top_class):
                self.pending_lower[(arc, other)] = self.pending_lower.get((arc, other), 0) + 1
        self.blocked: dict[tuple[Arc, int], list[int]] = {}
        self.far = rule.endswith("-far")
        self.by_remaining = rule.startswith("longest-remaining")
        self.heap: list[tuple[tuple[Any, ...], int]] = []

    def est(self, t: int) -> float:
        """The earliest start of transfer t: its inputs arrived, its link and budgets free."""
        tr = self.problem.transfers[t]
        ready = max((self.arrival[d] for d in tr.deps), default=0.0)
        ready = max(ready, self.link_free.get(tr.arc, 0.0))
        for r in self.problem.resources_of.get(tr.arc, ()):
            ready = max(ready, self.res_free[r])
        return ready

    def key(self, t: int) -> tuple[Any, ...]:
        tr = self.problem.transfers[t]
        spread = (tr.dst - tr.src) % self.ranks
        tie = (-spread if self.far else spread, tr.chunk, tr.src, tr.dst)
        e = self.est(t)
        return ((-self.tail[t], e) if self.by_remaining else (e, -self.tail[t])) + tie

    def release(self, t: int) -> None:
        slot = (self.problem.transfers[t].arc, self.problem.link_class.get(t, 0))
        if self.pending_lower.get(slot, 0) > 0:
            self.blocked.setdefault(slot, []).append(t)
        else:
            heapq.heappush(self.heap, (self.key(t), t))

    def place(self, t: int) -> None:
        """Put t at the end of its link's and budgets' queues; release what waited for it."""
        tr = self.problem.transfers[t]
        end = self.est(t) + self.problem.cost(t)
        self.arrival[t] = end
        self.link_free[tr.arc] = end
        self.link_seq.setdefault(tr.arc, []).append(t)
        for r in self.problem.resources_of.get(tr.arc, ()):
            self.res_free[r] = end
            self.res_seq[r].append(t)
        for other in range(self.problem.link_class.get(t, 0) + 1, self.top_class):
            slot = (tr.arc, other)
            if slot in self.pending_lower:
                self.pending_lower[slot] -= 1
                if self.pending_lower[slot] == 0:
                    for b in self.blocked.pop(slot, []):
                        heapq.heappush(self.heap, (self.key(b), b))
        for s2 in self.problem.dependents[t]:
            self.waiting[s2] -= 1
            if self.waiting[s2] == 0:
                self.release(s2)


def list_schedule(problem: ScheduleProblem, rule: str = RULES[0]) -> Orders:
    """Greedy list scheduling: repeatedly place the best ready transfer (by `rule`) at the end of its link's
    and budgets' queues, at the earliest time they and its inputs allow."""
    if rule not in RULES:
        raise ScheduleError(f"unknown ordering rule {rule!r}; use one of {', '.join(RULES)}")
    state = _ListScheduler(problem, rule)
    for t in range(len(problem.transfers)):
        if state.waiting[t] == 0:
            state.release(t)
    placed = 0
    while state.heap:
        k0, t = heapq.heappop(state.heap)
        k1 = state.key(t)
        if k1 != k0:  # stale: its earliest start moved (keys only grow)
            heapq.heappush(state.heap, (k1, t))
            continue
        state.place(t)
        placed += 1
    if placed != len(problem.transfers):
        raise ScheduleError("list scheduling stalled: some transfers never became ready (dependency cycle)")
    return Orders(MappingProxyType({a: tuple(v) for a, v in state.link_seq.items()}),
                  tuple(tuple(v) for v in state.res_seq))


def best_list_schedule(problem: ScheduleProblem, rules: tuple[str, ...] = RULES, *,
                       stop: Stop = never) -> tuple[Orders, Timing, str]:
    """Try each rule, return the orders with the smallest makespan (and the rule that made them). The first
    rule always runs; `stop()` is asked before each of the others."""
    best: tuple[Orders, Timing, str] | None = None
    for rule in rules:
        if best is not None and stop():
            break
        orders = list_schedule(problem, rule)
        timing = evaluate(problem, orders)
        if best is None or timing.makespan < best[1].makespan - TIE_US:
            best = (orders, timing, rule)
    assert best is not None
    return best


def greedy_joins(problem: ScheduleProblem, orders: Orders, *, stop: Stop = never) -> tuple[Orders, Timing]:
    """Join consecutive inter-node transfers one pair at a time (in link order) whenever the makespan
    does not grow; groups stay within max_together. When `stop()` says so it keeps the joins made so far
    (each one evaluated: the result is a valid schedule)."""
    best = evaluate(problem, orders)
    joins = set(orders.joins)
    group_size: dict[int, int] = {}
    for seq in orders.links.values():
        run = 1
        for t in seq:
            run = run + 1 if t in joins else 1
            group_size[t] = run
    for prev, nxt in join_candidates(problem, orders):
        if nxt in joins or group_size.get(prev, 1) + 1 > problem.max_together:
            continue
        if stop():
            break
        trial = replace(orders, joins=frozenset(joins | {nxt}))
        try:
            timing = evaluate(problem, trial)
        except ScheduleError:
            continue
        if timing.makespan <= best.makespan + TIE_US:
            joins.add(nxt)
            group_size[nxt] = group_size.get(prev, 1) + 1
            best = timing
    return replace(orders, joins=frozenset(joins)), best


def relist_with_groups(problem: ScheduleProblem, orders: Orders,
                       rules: tuple[str, ...] = RULES) -> tuple[Orders, Timing]:
    """List-schedule again with each group of joined transfers as one transfer (so that what follows a
    group is ordered knowing when the group arrives); returns the expanded orders and their timing."""
    head_of: dict[int, int] = {}
    members: dict[int, list[int]] = {}
    for seq in orders.links.values():
        head = None
        for t in seq:
            if t in orders.joins and head is not None:
                members[head].append(t)
                head_of[t] = head
            else:
                head = t
                members[t] = [t]
                head_of[t] = t
    heads = sorted(members)
    new_id = {h: i for i, h in enumerate(heads)}
    merged = []
    for h in heads:
        deps = sorted({new_id[head_of[d]] for m in members[h] for d in problem.transfers[m].deps} - {new_id[h]})
        tr = problem.transfers[h]
        merged.append(Transfer(tr.chunk, tr.src, tr.dst, tr.op, tuple(deps)))
    link_class = {new_id[h]: min(problem.link_class.get(m, 0) for m in members[h]) for h in heads
                  if any(m in problem.link_class for m in members[h])}
    multiplicity = {new_id[h]: len(members[h]) for h in heads if len(members[h]) > 1}
    merged_problem = replace(problem, transfers=tuple(merged), link_class=link_class, multiplicity=multiplicity)
    merged_orders, _, _ = best_list_schedule(merged_problem, rules)

    def expand(seq: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(m for i in seq for m in members[heads[i]])

    expanded = Orders(MappingProxyType({arc: expand(seq) for arc, seq in merged_orders.links.items()}),
                      tuple(expand(seq) for seq in merged_orders.resources), orders.joins)
    return expanded, evaluate(problem, expanded)


def _compositions(n: int, most: int) -> Iterator[tuple[int, ...]]:
    """Ways to cut a sequence of n into consecutive groups of at most `most` (as group sizes)."""
    if n == 0:
        yield ()
        return
    for first in range(1, min(most, n) + 1):
        for rest in _compositions(n - first, most):
            yield (first,) + rest


def pattern_trials(problem: ScheduleProblem, orders: Orders, *, longest: int = 10,
                   stop: Stop = never) -> Iterator[tuple[tuple[int, ...], Orders]]:
    """Every way of cutting the inter-node links' sequences into groups (the same group sizes on every
    link with as many transfers, as symmetric links have), for sequences of at most `longest`, as
    (group sizes, orders with those joins) in a fixed order; only cuts whose joined pairs are
    consecutive on every budget of their link and independent. Ends when `stop()` says so."""
    if problem.max_together < 2:
        return
    by_length: dict[int, list[Arc]] = {}
    for arc, seq in orders.links.items():
        if arc in problem.groupable and 1 < len(seq) <= longest:
            by_length.setdefault(len(seq), []).append(arc)
    budgets = problem.resources_of
    position = [{t: i for i, t in enumerate(seq)} for seq in orders.resources]
    for n, arcs in sorted(by_length.items()):
        for sizes in _compositions(n, problem.max_together):
            if stop():
                return
            joins = set(orders.joins) - {t for a in arcs for t in orders.links[a]}
            for a in arcs:
                seq, pos = orders.links[a], 0
                for size in sizes:
                    joins.update(seq[pos + 1:pos + size])
                    pos += size
            # a join needs its pair consecutive on every budget of the link too, and independent
            if any(prev in problem.transfers[nxt].deps or
                   any(position[r].get(nxt, NOT_QUEUED) != position[r].get(prev, NOT_QUEUED) + 1
                       for r in budgets.get(a, ()))
                   for a in arcs for prev, nxt in zip(orders.links[a], orders.links[a][1:], strict=False)
                   if nxt in joins):
                continue
            yield sizes, replace(orders, joins=frozenset(joins))


def pattern_joins(problem: ScheduleProblem, orders: Orders, *, longest: int = 10, keep: int = 4,
                  rules: tuple[str, ...] = RULES, stop: Stop = never) -> tuple[Orders, Timing]:
    """Try every cut of `pattern_trials` (link sequences of at most `longest` transfers); the `keep` best are
    list-scheduled again around their groups (each re-listing costs a list schedule per rule).
    Returns the best orders found (maybe `orders`). When `stop()` says so it stops trying and keeps what
    it has."""
    best_orders, best = orders, evaluate(problem, orders)
    tried: list[tuple[float, int, Orders]] = []
    for _, trial in pattern_trials(problem, orders, longest=longest, stop=stop):
        try:
            timing = evaluate(problem, trial)
        except ScheduleError:
            continue
        tried.append((round(timing.makespan, 9), len(tried), trial))
    for makespan, _, trial in sorted(tried)[:keep]:
        if makespan < best.makespan - TIE_US:
            best_orders, best = trial, evaluate(problem, trial)
        if stop():
            continue
        try:
            again, timing = relist_with_groups(problem, trial, rules)
        except ScheduleError:
            continue
        if timing.makespan < best.makespan - TIE_US:
            best_orders, best = again, timing
    return best_orders, best
