"""A sparse MILP model built in bulk and solved with its answer checked (drivers: `milp_solvers.py`).

    model = MilpModel("routing")
    x = model.add_binaries(3); t = model.add_columns(1, cost=1.0)[0]
    model.add_ge("cover", Lin.total(x), 1.0)                         # x0 + x1 + x2 >= 1
    model.add_ge("makespan", Lin.of(t), Lin.of(x[0], 2.0) + 0.5)     # t >= 2 x0 + 0.5
    model.add("pick", between(1.0, Lin.total(x), 2.0))                # 1 <= x0 + x1 + x2 <= 2
    result = model.solve("highs", time_limit=10)

Encodings write rows as small linear expressions (`Lin`, compared into a `Row` by `at_least` / `at_most` /
`equal` / `between`); `add_row` takes plain index/coefficient lists underneath. No solver expression
objects, so a model with 10^5 nonzeros builds in well under a second. `solve` hands the whole matrix
(`LpMatrix`) to a driver and checks what comes back against the rows, bounds and integrality before it
is used: no solver's word is trusted (module docstring of `milp_solvers`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import numpy as np

from collsynth.encodings.milp_solvers import (
    DEFAULT_CBC_STOP,
    SOLVERS,
    CbcStop,
    LpMatrix,
    SolverError,
    SolveResult,
    solve_matrix,
    stop_grace,
)
from collsynth.schedule.result import ModelSize

INF = math.inf
FEASIBILITY_TOL = 1e-6
# a binary column's value counts as 1 above this (solvers return values within their tolerance of 0 or 1)
CHOSEN = 0.5


Key = TypeVar("Key", bound=Hashable)  # what names a column: its index in a model, or a key mapped to one later
Other = TypeVar("Other", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Lin(Generic[Key]):
    """A linear expression sum(coef * x[col]) + const, for rows that read like their formula. Columns are
    model indices, or any keys that `renamed` maps to indices later (the flow-LP bound's symmetric orbits)."""

    terms: Mapping[Key, float]
    const: float = 0.0

    @staticmethod
    def of(col: Other, coef: float = 1.0) -> Lin[Other]:
        return Lin({col: coef})

    @staticmethod
    def total(cols: Iterable[Other], coef: float = 1.0) -> Lin[Other]:
        """sum_i coef * x[cols[i]] (a column listed twice counts twice)."""
        return Lin.weighted((c, coef) for c in cols)

    @staticmethod
    def weighted(terms: Iterable[tuple[Other, float]]) -> Lin[Other]:
        """sum_i coef_i * x[col_i] over (col_i, coef_i) pairs (repeated columns are summed in order)."""
        merged: dict[Other, float] = {}
        for c, v in terms:
            merged[c] = merged.get(c, 0.0) + v
        return Lin(merged)

    def renamed(self, name: Callable[[Key], Other]) -> Lin[Other]:
        """The same expression over the columns name(key) (terms that meet are summed in order)."""
        return Lin(_renamed(self.terms, name), self.const)

    def __add__(self, other: Lin[Key] | float) -> Lin[Key]:
        if not isinstance(other, Lin):
            return Lin(self.terms, self.const + other)
        terms = dict(self.terms)
        for c, v in other.terms.items():
            terms[c] = terms.get(c, 0.0) + v
        return Lin(terms, self.const + other.const)

    def __sub__(self, other: Lin[Key] | float) -> Lin[Key]:
        if not isinstance(other, Lin):
            return Lin(self.terms, self.const - other)
        terms = dict(self.terms)
        for c, v in other.terms.items():
            terms[c] = terms.get(c, 0.0) - v
        return Lin(terms, self.const - other.const)

    def __mul__(self, k: float) -> Lin[Key]:
        return Lin({c: v * k for c, v in self.terms.items()}, self.const * k)


@dataclass(frozen=True, slots=True)
class Row(Generic[Key]):
    """One constraint lo <= sum terms[col] * x[col] <= hi, built by `at_least` / `at_most` / `equal` /
    `between` from expressions, and added to a model by `MilpModel.add`."""

    terms: Mapping[Key, float]
    lo: float = -math.inf
    hi: float = math.inf

    def renamed(self, name: Callable[[Key], Other]) -> Row[Other]:
        return Row(_renamed(self.terms, name), self.lo, self.hi)


def _renamed(terms: Mapping[Key, float], name: Callable[[Key], Other]) -> dict[Other, float]:
    merged: dict[Other, float] = {}
    for c, v in terms.items():
        key = name(c)
        merged[key] = merged.get(key, 0.0) + v
    return merged


def at_least(lhs: Lin[Key], rhs: Lin[Key] | float) -> Row[Key]:
    """lhs >= rhs."""
    diff = lhs - rhs
    return Row(diff.terms, lo=-diff.const)


def at_most(lhs: Lin[Key], rhs: Lin[Key] | float) -> Row[Key]:
    """lhs <= rhs."""
    diff = lhs - rhs
    return Row(diff.terms, hi=-diff.const)


def equal(lhs: Lin[Key], rhs: Lin[Key] | float) -> Row[Key]:
    """lhs == rhs."""
    diff = lhs - rhs
    return Row(diff.terms, lo=-diff.const, hi=-diff.const)


def between(lo: float, expr: Lin[Key], hi: float) -> Row[Key]:
    """lo <= expr <= hi."""
    return Row(expr.terms, lo - expr.const, hi - expr.const)


class MilpModel:
    """Minimize c.x subject to row_lo <= A x <= row_hi, col_lo <= x <= col_hi, some x integer."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lb: list[float] = []
        self._ub: list[float] = []
        self._integer: list[bool] = []
        self._cost: list[float] = []
        self._row_lo: list[float] = []
        self._row_hi: list[float] = []
        self._rows: list[int] = []
        self._cols: list[int] = []
        self._vals: list[float] = []
        self._families: dict[str, int] = {}

    # --- building ---------------------------------------------------------------------------
    @property
    def num_columns(self) -> int:
        return len(self._lb)

    @property
    def num_rows(self) -> int:
        return len(self._row_lo)

    def add_columns(self, count: int, *, lb: float = 0.0, ub: float = INF, integer: bool = False,
                    cost: float = 0.0) -> range:
        """`count` new columns with the same bounds; returns their indices."""
        start = len(self._lb)
        self._lb.extend([lb] * count)
        self._ub.extend([ub] * count)
        self._integer.extend([integer] * count)
        self._cost.extend([cost] * count)
        return range(start, start + count)

    def add_binaries(self, count: int, *, cost: float = 0.0) -> range:
        return self.add_columns(count, lb=0.0, ub=1.0, integer=True, cost=cost)

    def set_cost(self, column: int, cost: float) -> None:
        self._cost[column] = cost

    def set_bounds(self, column: int, lb: float, ub: float) -> None:
        self._lb[column] = lb
        self._ub[column] = ub

    def column_bounds(self, column: int) -> tuple[float, float]:
        return self._lb[column], self._ub[column]

    def add_row(self, family: str, cols: Sequence[int], coefs: Sequence[float], lo: float = -INF,
                hi: float = INF) -> None:
        """One row lo <= sum coefs[i] * x[cols[i]] <= hi (duplicate columns are summed)."""
        row = len(self._row_lo)
        self._row_lo.append(lo)
        self._row_hi.append(hi)
        self._rows.extend([row] * len(cols))
        self._cols.extend(cols)
        self._vals.extend(coefs)
        self._families[family] = self._families.get(family, 0) + 1

    def add(self, family: str, row: Row[int]) -> int:
        """Add one row (`at_least(lhs, rhs)`, `at_most`, `equal`, `between`); returns its index."""
        index = self.num_rows
        self.add_row(family, list(row.terms), list(row.terms.values()), lo=row.lo, hi=row.hi)
        return index

    def add_ge(self, family: str, lhs: Lin[int], rhs: Lin[int] | float) -> int:
        """One row lhs >= rhs."""
        return self.add(family, at_least(lhs, rhs))

    def add_le(self, family: str, lhs: Lin[int], rhs: Lin[int] | float) -> int:
        """One row lhs <= rhs."""
        return self.add(family, at_most(lhs, rhs))

    def add_eq(self, family: str, lhs: Lin[int], rhs: Lin[int] | float) -> int:
        """One row lhs == rhs."""
        return self.add(family, equal(lhs, rhs))

    def row_upper(self, row: int) -> float:
        return self._row_hi[row]

    def size(self) -> ModelSize:
        return ModelSize(self.num_columns, sum(self._integer), self.num_rows, len(self._vals),
                         tuple(self._families.items()))

    # --- matrix views -----------------------------------------------------------------------
    def _csc(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = np.asarray(self._rows, dtype=np.int64)
        cols = np.asarray(self._cols, dtype=np.int64)
        vals = np.asarray(self._vals, dtype=np.float64)
        # merge duplicate (row, col) entries, then order by column
        key = cols * max(1, self.num_rows) + rows
        order = np.argsort(key, kind="stable")
        key, rows, cols, vals = key[order], rows[order], cols[order], vals[order]
        if len(key):
            first = np.concatenate(([True], key[1:] != key[:-1]))
            group = np.cumsum(first) - 1
            vals = np.bincount(group, weights=vals).astype(np.float64)
            rows, cols = rows[first], cols[first]
        start = np.searchsorted(cols, np.arange(self.num_columns + 1), side="left")
        return start.astype(np.int32), rows.astype(np.int32), vals

    def activities(self, x: np.ndarray) -> np.ndarray:
        act = np.zeros(self.num_rows)
        if self._rows:
            np.add.at(act, np.asarray(self._rows), np.asarray(self._vals) * x[np.asarray(self._cols)])
        return act

    def violation(self, x: np.ndarray) -> float:
        """Largest violation of a row, bound or integrality by point x (scaled by 1 + |rhs|)."""
        lb, ub = np.asarray(self._lb), np.asarray(self._ub)
        with np.errstate(invalid="ignore"):
            below = np.where(np.isfinite(lb), (lb - x) / (1 + np.abs(lb)), 0.0)
            above = np.where(np.isfinite(ub), (x - ub) / (1 + np.abs(ub)), 0.0)
        worst = float(max(np.max(below, initial=0.0), np.max(above, initial=0.0)))
        integer = np.asarray(self._integer, dtype=bool)
        if integer.any():
            worst = max(worst, float(np.max(np.abs(x[integer] - np.round(x[integer])), initial=0.0)))
        act = self.activities(x)
        # scale by the size of the row's terms: solvers (CBC via files) report values to ~8 digits
        size = np.zeros(self.num_rows)
        if self._rows:
            np.add.at(size, np.asarray(self._rows), np.abs(np.asarray(self._vals) * x[np.asarray(self._cols)]))
        lo, hi = np.asarray(self._row_lo), np.asarray(self._row_hi)
        with np.errstate(invalid="ignore"):
            low = np.where(np.isfinite(lo), (lo - act) / (1 + np.abs(lo) + size), 0.0)
            high = np.where(np.isfinite(hi), (act - hi) / (1 + np.abs(hi) + size), 0.0)
        return max(worst, float(np.max(low, initial=0.0)), float(np.max(high, initial=0.0)))

    def objective_value(self, x: np.ndarray) -> float:
        return float(np.dot(np.asarray(self._cost), x))

    # --- solving ----------------------------------------------------------------------------
    def matrix(self) -> LpMatrix:
        start, index, value = self._csc()
        return LpMatrix(self.name, np.asarray(self._cost, dtype=np.float64), np.asarray(self._lb, dtype=np.float64),
                        np.asarray(self._ub, dtype=np.float64), np.asarray(self._integer, dtype=bool),
                        np.asarray(self._row_lo, dtype=np.float64), np.asarray(self._row_hi, dtype=np.float64),
                        start, index, value)

    def solve(self, solver: str = "highs", *, time_limit: float | None = None, gap: float = 1e-4,
              warm_start: np.ndarray | None = None, cbc: CbcStop = DEFAULT_CBC_STOP) -> SolveResult:
        """Solve and check the answer (module docstring). A time-limited run returns its best point with
        status `feasible` and its proven bound."""
        if solver not in SOLVERS:
            raise SolverError(f"unknown solver {solver!r}; use cbc or highs")
        if warm_start is not None and self.violation(warm_start) > FEASIBILITY_TOL:
            warm_start = None  # never hand a solver an infeasible start
        started = time.perf_counter()
        result = solve_matrix(self.matrix(), solver, time_limit=time_limit, gap=gap, warm=warm_start, cbc=cbc)
        seconds = time.perf_counter() - started
        values, status = result.values, result.status
        if solver == "cbc" and status in ("no_solution", "feasible") and warm_start is not None and (
                values is None or self.violation(values) > FEASIBILITY_TOL
                or self.objective_value(values) > self.objective_value(warm_start)):
            # CBC stopped without a usable point better than the start it was handed: the start still holds
            values, status = warm_start, "feasible"
        if values is not None and self.violation(values) > FEASIBILITY_TOL:
            values, status = None, ("no_solution" if status in ("optimal", "feasible") else status)
        if values is None and status in ("optimal", "feasible"):
            status = "no_solution"
        objective = self.objective_value(values) if values is not None else None
        bound = result.bound
        if status == "optimal" and objective is not None and bound is None:
            bound = objective
        if objective is not None and bound is not None:
            bound = min(bound, objective)
        return SolveResult(solver, status, objective, bound, seconds, values, result.message)


__all__ = ["FEASIBILITY_TOL", "INF", "SOLVERS", "Lin", "MilpModel", "ModelSize", "Row", "SolveResult", "SolverError",
           "at_least", "at_most", "between", "equal", "stop_grace"]
