"""Transfers, their orders on links and switches, and exact timing of a fixed order.

A `ScheduleProblem` is a set of transfers (one chunk over one link) with dependencies (a transfer
starts after the transfers it depends on have arrived). An `Orders` fixes the sequence of transfers on
every link and every shared budget (switch port, NIC), and which consecutive inter-node transfers go
together in one transfer. Given orders, the earliest start times are a longest path (`evaluate`); the
orders themselves come from greedy list scheduling (`list_schedule`, TACCL's heuristic ordering: the
transfer whose chunk still has the longest way to go goes first, ties by earliest possible start).

Timing model (as the simulator's): a group of k chunks on link l starting at s holds l and all of its
budgets until s + alpha_l + k * beta_l, when all k chunks arrive.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from collsynth.core.errors import CollsynthError

Arc = tuple[int, int]
COPY = "copy"
REDUCE = "reduce"
# the queue position of a transfer that is not on a budget: never next to another transfer's
NOT_QUEUED = -9


class ScheduleError(CollsynthError):
    """Orders that cannot be executed (a cycle between dependencies and link/switch orders)."""


@dataclass(frozen=True)
class Transfer:
    chunk: int
    src: int
    dst: int
    op: str = COPY
    deps: tuple[int, ...] = ()

    @property
    def arc(self) -> Arc:
        return self.src, self.dst


@dataclass(frozen=True)
class ScheduleProblem:
    transfers: tuple[Transfer, ...]
    alpha: Mapping[Arc, float]
    beta: Mapping[Arc, float]  # per chunk, us
    resources: tuple[frozenset[Arc], ...]
    groupable: frozenset[Arc] = frozenset()
    max_together: int = 1
    # transfer -> class; on its link a transfer waits for every transfer of a lower class (senders first)
    link_class: Mapping[int, int] = field(default_factory=dict)
    # transfer -> number of chunks it carries (default 1; > 1 for a group merged into one transfer)
    multiplicity: Mapping[int, int] = field(default_factory=dict)

    def cost(self, t: int) -> float:
        arc = self.transfers[t].arc
        return self.alpha[arc] + self.multiplicity.get(t, 1) * self.beta[arc]

    @cached_property
    def resources_of(self) -> Mapping[Arc, tuple[int, ...]]:
        out: dict[Arc, list[int]] = {}
        for i, links in enumerate(self.resources):
            for arc in links:
                out.setdefault(arc, []).append(i)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    @cached_property
    def dependents(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in self.transfers]
        for t, tr in enumerate(self.transfers):
            for d in tr.deps:
                out[d].append(t)
        return tuple(tuple(x) for x in out)

    @cached_property
    def remaining(self) -> tuple[float, ...]:
        """Longest chain of transfer costs from the start of each transfer to the end of the schedule."""
        order = self.topological_order()
        tail = [0.0] * len(self.transfers)
        for t in reversed(order):
            tail[t] = self.cost(t) + max((tail[s] for s in self.dependents[t]), default=0.0)
        return tuple(tail)

    def topological_order(self) -> list[int]:
        indeg = [len(tr.deps) for tr in self.transfers]
        queue = [t for t, d in enumerate(indeg) if d == 0]
        order = []
        while queue:
            t = queue.pop()
            order.append(t)
            for s in self.dependents[t]:
                indeg[s] -= 1
                if indeg[s] == 0:
                    queue.append(s)
        if len(order) != len(self.transfers):
            raise ScheduleError("the transfers' dependencies form a cycle")
        return order


@dataclass(frozen=True)
class Orders:
    links: Mapping[Arc, tuple[int, ...]]
    resources: tuple[tuple[int, ...], ...]
    # transfers sent together with the transfer before them on their link
    joins: frozenset[int] = frozenset()


@dataclass(frozen=True)
class Timing:
    start: tuple[float, ...]
    arrival: tuple[float, ...]
    makespan: float


def orders_from_times(problem: ScheduleProblem, priority: list[float], joins: frozenset[int] = frozenset()) -> Orders:
    """Orders that sort each link's and budget's transfers by `priority` (e.g. start times)."""
    per_link: dict[Arc, list[int]] = {}
    for t, tr in enumerate(problem.transfers):
        per_link.setdefault(tr.arc, []).append(t)
    links = {arc: tuple(sorted(ts, key=lambda t: (priority[t], t))) for arc, ts in per_link.items()}
    resources = []
    for links_of_res in problem.resources:
        members = [t for arc in links_of_res for t in per_link.get(arc, ())]
        resources.append(tuple(sorted(members, key=lambda t: (priority[t], problem.transfers[t].arc, t))))
    return Orders(MappingProxyType(links), tuple(resources), joins)


def evaluate(problem: ScheduleProblem, orders: Orders) -> Timing:
    """Earliest start and arrival of every transfer under the given orders (exact)."""
    n = len(problem.transfers)
    unit = list(range(n))  # unit (group head) of each transfer
    members: dict[int, list[int]] = {t: [t] for t in range(n)}
    for seq in orders.links.values():
        for prev, nxt in zip(seq, seq[1:], strict=False):
            if nxt in orders.joins:
                head = unit[prev]
                unit[nxt] = head
                members[head].append(nxt)
                del members[nxt]
    heads = sorted(members)
    # unit-level edges: (from unit, kind) where kind "arrive" waits for arrival, "free" for end of transfer
    preds: dict[int, set[int]] = {h: set() for h in heads}
    for t, tr in enumerate(problem.transfers):
        for d in tr.deps:
            if unit[d] == unit[t]:
                raise ScheduleError(f"transfer {t} is grouped with transfer {d} it depends on")
            preds[unit[t]].add(unit[d])
    for seq in list(orders.links.values()) + list(orders.resources):
        for prev, nxt in zip(seq, seq[1:], strict=False):
            if unit[prev] != unit[nxt]:
                preds[unit[nxt]].add(unit[prev])
    succs: dict[int, list[int]] = {h: [] for h in heads}
    indeg = {h: len(p) for h, p in preds.items()}
    for h, p in preds.items():
        for q in p:
            succs[q].append(h)
    queue = [h for h in heads if indeg[h] == 0]
    start_u: dict[int, float] = {}
    end_u: dict[int, float] = {}
    done = 0
    while queue:
        h = queue.pop()
        done += 1
        s = max((end_u[q] for q in preds[h]), default=0.0)
        start_u[h] = s
        arc = problem.transfers[h].arc
        chunks = sum(problem.multiplicity.get(m, 1) for m in members[h])
        end_u[h] = s + problem.alpha[arc] + chunks * problem.beta[arc]
        for q in succs[h]:
            indeg[q] -= 1
            if indeg[q] == 0:
                queue.append(q)
    if done != len(heads):
        raise ScheduleError("the link/switch orders contradict the transfers' dependencies (a cycle)")
    start = tuple(start_u[unit[t]] for t in range(n))
    arrival = tuple(end_u[unit[t]] for t in range(n))
    return Timing(start, arrival, max(arrival, default=0.0))


def join_candidates(problem: ScheduleProblem, orders: Orders) -> list[tuple[int, int]]:
    """(prev, next) consecutive on an inter-node link, also consecutive on every budget of that link, and
    independent of each other: the pairs that may be sent together."""
    if problem.max_together < 2:
        return []
    position = [{t: i for i, t in enumerate(seq)} for seq in orders.resources]
    out = []
    for arc, seq in orders.links.items():
        if arc not in problem.groupable:
            continue
        budgets = problem.resources_of.get(arc, ())
        for prev, nxt in zip(seq, seq[1:], strict=False):
            if prev in problem.transfers[nxt].deps:
                continue
            if all(position[r].get(nxt, NOT_QUEUED) == position[r].get(prev, NOT_QUEUED) + 1 for r in budgets):
                out.append((prev, nxt))
    return out


