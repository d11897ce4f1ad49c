"""The scheduling MILP (TACCL's contiguity model, written for open-source solvers): exact start times for
fixed routes and fixed orders on links and budgets, and which consecutive inter-node transfers go together
(binary g: the group pays alpha once). Without inter-node links it is an LP. Its big-M is the makespan of
the heuristic schedule (a valid upper bound on every start time), never a fixed 1e7.

One function per constraint family, its formula in the comment above it; `arrival(t)` and `end(t)` are the
linear expressions of when transfer t's data arrives and when its link is free again."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from collsynth.encodings.milp_model import CHOSEN, Lin, MilpModel, ModelSize
from collsynth.encodings.milp_ordering import Orders, ScheduleProblem, Timing, join_candidates

# big-M = heuristic makespan x (1 + BIG_M_REL) + BIG_M_REL: strictly above every start time
BIG_M_REL = 1e-6

When = Callable[[int], Lin]


@dataclass(frozen=True)
class ScheduleModel:
    model: MilpModel
    start_col: tuple[int, ...]
    join_col: Mapping[int, int]  # transfer -> binary "sent together with the one before it on its link"
    makespan_col: int
    acc_col: Mapping[int, int]  # transfer -> time its data has been pushed (inter-node candidates only)
    arr_col: Mapping[int, int]  # transfer -> time its group arrives


def build_schedule_model(problem: ScheduleProblem, orders: Orders, upper_bound: float) -> ScheduleModel:
    """Exact times for fixed orders, and which inter-node transfers go together (module docstring)."""
    n = len(problem.transfers)
    model = MilpModel("schedule")
    big_m = upper_bound * (1.0 + BIG_M_REL) + BIG_M_REL
    start = model.add_columns(n, lb=0.0, ub=big_m)
    makespan = model.add_columns(1, lb=0.0, ub=big_m, cost=1.0)[0]
    candidates = join_candidates(problem, orders)
    join_col = {nxt: model.add_binaries(1)[0] for _, nxt in candidates}
    # group-capable transfers get acc (data pushed) and arr (group arrives) columns
    grouped = sorted({t for pair in candidates for t in pair})
    acc = {t: model.add_columns(1, lb=0.0, ub=big_m)[0] for t in grouped}
    arr = {t: model.add_columns(1, lb=0.0, ub=big_m)[0] for t in grouped}

    def arrival(t: int) -> Lin:
        return Lin.of(arr[t]) if t in arr else Lin.of(start[t]) + problem.cost(t)

    def end(t: int) -> Lin:
        return Lin.of(acc[t]) if t in acc else Lin.of(start[t]) + problem.cost(t)

    _wait_for_inputs(model, problem, start, arrival)
    _link_order(model, orders, start, end, join_col, big_m)
    _group_accumulates(model, problem, orders, start, acc, arr, join_col, big_m)
    _max_together(model, problem, orders, join_col)
    _budget_order(model, orders, start, end, join_col, big_m)
    _schedule_makespan(model, problem, makespan, arrival)
    return ScheduleModel(model, tuple(start), MappingProxyType(join_col), makespan, MappingProxyType(acc),
                         MappingProxyType(arr))


def _wait_for_inputs(model: MilpModel, problem: ScheduleProblem, start: range, arrival: When) -> None:
    # start[t] >= arrival[d] for each dependency d of t
    for t, tr in enumerate(problem.transfers):
        for d in tr.deps:
            model.add_ge("wait_for_inputs", Lin.of(start[t]), arrival(d))


def _link_order(model: MilpModel, orders: Orders, start: range, end: When, join_col: Mapping[int, int],
                big_m: float) -> None:
    # start[next] >= end[prev] - M g;  start[next] >= start[prev];  start[next] <= start[prev] + M (1 - g)
    for seq in orders.links.values():
        for prev, nxt in zip(seq, seq[1:], strict=False):
            g = join_col.get(nxt)
            if g is None:
                model.add_ge("link_order", Lin.of(start[nxt]), end(prev))
                continue
            model.add_ge("link_order", Lin.of(start[nxt]) + Lin.of(g, big_m), end(prev))
            model.add_ge("link_order_monotone", Lin.of(start[nxt]), Lin.of(start[prev]))
            model.add_le("together_start_together", Lin.of(start[nxt]) + Lin.of(g, big_m),
                         Lin.of(start[prev]) + big_m)


def _group_accumulates(model: MilpModel, problem: ScheduleProblem, orders: Orders, start: range,
                       acc: Mapping[int, int], arr: Mapping[int, int], join_col: Mapping[int, int],
                       big_m: float) -> None:
    # acc[t] >= start[t] + alpha + beta; arr[t] >= acc[t]; acc[next] >= acc[prev] + beta;
    # arr[prev] >= arr[next] - M (1 - g)   (a group arrives when its last chunk does)
    for t, col in acc.items():
        model.add_ge("group_accumulates", Lin.of(col), Lin.of(start[t]) + problem.cost(t))
        model.add_ge("group_arrives_together", Lin.of(arr[t]), Lin.of(col))
    for seq in orders.links.values():
        for prev, nxt in zip(seq, seq[1:], strict=False):
            g = join_col.get(nxt)
            if g is None:
                continue
            beta = problem.beta[problem.transfers[nxt].arc]
            model.add_ge("group_accumulates", Lin.of(acc[nxt]), Lin.of(acc[prev]) + beta)
            model.add_ge("group_arrives_together", Lin.of(arr[prev]), Lin.of(arr[nxt]) + Lin.of(g, big_m) - big_m)


def _max_together(model: MilpModel, problem: ScheduleProblem, orders: Orders, join_col: Mapping[int, int]) -> None:
    # sum of K consecutive joins <= K - 1 (at most K chunks in one transfer)
    k = problem.max_together
    for seq in orders.links.values():
        run = [join_col.get(t) for t in seq[1:]]
        for i in range(len(run) - k + 1):
            window = [g for g in run[i:i + k] if g is not None]
            if len(window) == k:
                model.add_le("max_together", Lin.total(window), k - 1)


def _budget_order(model: MilpModel, orders: Orders, start: range, end: When, join_col: Mapping[int, int],
                  big_m: float) -> None:
    # start[b] >= end[a] - M g  for consecutive (a, b) on a switch port / NIC (g: a and b go together)
    for seq in orders.resources:
        for prev, nxt in zip(seq, seq[1:], strict=False):
            g = join_col.get(nxt)
            together = Lin.of(g, big_m) if g is not None else Lin({})
            model.add_ge("budget_order", Lin.of(start[nxt]) + together, end(prev))


def _schedule_makespan(model: MilpModel, problem: ScheduleProblem, makespan: int, arrival: When) -> None:
    # arrival[t] <= T
    for t in range(len(problem.transfers)):
        model.add_ge("makespan", Lin.of(makespan), arrival(t))


def schedule_start(problem: ScheduleProblem, sm: ScheduleModel, orders: Orders, timing: Timing) -> np.ndarray:
    """The model point of an evaluated schedule (its joins must be among the model's candidates)."""
    x = np.zeros(sm.model.num_columns)
    for t, col in enumerate(sm.start_col):
        x[col] = timing.start[t]
    x[sm.makespan_col] = timing.makespan
    for t, col in sm.join_col.items():
        x[col] = 1.0 if t in orders.joins else 0.0
    for seq in orders.links.values():
        pushed = 0.0
        for t in seq:
            tr_beta = problem.beta[problem.transfers[t].arc]
            # data pushed: a group's k-th chunk is out alpha + k * beta after the group starts
            pushed = pushed + tr_beta if t in orders.joins else timing.start[t] + problem.cost(t)
            if t in sm.acc_col:
                x[sm.acc_col[t]] = pushed
            if t in sm.arr_col:
                x[sm.arr_col[t]] = timing.arrival[t]
    return x


def joins_from_solution(sm: ScheduleModel, values: np.ndarray) -> frozenset[int]:
    return frozenset(t for t, col in sm.join_col.items() if values[col] > CHOSEN)


def model_size(model: MilpModel) -> ModelSize:
    return model.size()
