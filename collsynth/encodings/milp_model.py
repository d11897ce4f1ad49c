"""A sparse MILP model built in bulk, solved by HiGHS (highspy, directly) or CBC (through PuLP).

Encodings add variables and rows as plain index/coefficient lists (no solver expression objects, so
a model with 10^5 nonzeros builds in well under a second); `solve` hands the whole matrix to the solver
at once. The answer is checked here rather than trusted:
- PuLP reports a time-limited HiGHS run as "Optimal", so HiGHS is driven through highspy, whose model
  status, primal solution status and dual bound are read directly;
- CBC without a solution returns junk values, so every returned point is checked against the rows,
  bounds and integrality before it is used, and CBC's log is read for its proven bound;
- CBC overruns its own time limit in its root node on large models, so its process is stopped here
  (SIGINT, then SIGKILL) shortly after the limit (see `_run_cbc`).
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from collsynth.core.errors import CollsynthError

INF = math.inf
SOLVERS = ("cbc", "highs")
FEASIBILITY_TOL = 1e-6


class SolverError(CollsynthError):
    """A solver that is missing, failed, or was asked for something it cannot do."""


@dataclass(frozen=True)
class ModelSize:
    columns: int
    integer_columns: int
    rows: int
    nonzeros: int
    # rows per constraint family, in the order they were added
    families: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return (f"{self.columns} cols ({self.integer_columns} integer), {self.rows} rows, "
                f"{self.nonzeros} nonzeros")


@dataclass(frozen=True)
class SolveResult:
    solver: str
    # optimal | feasible (time limit, incumbent kept) | infeasible | no_solution | unbounded | error
    status: str
    objective: float | None
    bound: float | None
    seconds: float
    values: np.ndarray | None = field(default=None, repr=False, compare=False)
    message: str = ""

    @property
    def has_solution(self) -> bool:
        return self.values is not None and self.status in ("optimal", "feasible")

    @property
    def gap(self) -> float | None:
        """Relative gap (objective - bound) / |objective|; 0 when proven optimal."""
        if self.objective is None or self.bound is None:
            return None
        if self.status == "optimal":
            return 0.0
        return max(0.0, (self.objective - self.bound) / max(abs(self.objective), 1e-12))


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
            vals = np.bincount(group, weights=vals)
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
    def solve(self, solver: str = "highs", *, time_limit: float | None = None, gap: float = 1e-4,
              warm_start: np.ndarray | None = None) -> SolveResult:
        """Solve and check the answer (see the module docstring). A time-limited run returns its best
        point with status `feasible` and its proven bound."""
        if solver not in SOLVERS:
            raise SolverError(f"unknown solver {solver!r}; use cbc or highs")
        if warm_start is not None and self.violation(warm_start) > FEASIBILITY_TOL:
            warm_start = None  # never hand a solver an infeasible start
        started = time.perf_counter()
        if solver == "highs":
            result = self._solve_highs(time_limit, gap, warm_start)
        else:
            result = self._solve_cbc(time_limit, gap, warm_start)
        seconds = time.perf_counter() - started
        values = result.values
        status = result.status
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

    def _solve_highs(self, time_limit: float | None, gap: float, warm: np.ndarray | None) -> SolveResult:
        import highspy

        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("mip_rel_gap", float(gap))
        if time_limit is not None:
            h.setOptionValue("time_limit", float(time_limit))
        lp = highspy.HighsLp()
        lp.num_col_ = self.num_columns
        lp.num_row_ = self.num_rows
        lp.col_cost_ = np.asarray(self._cost, dtype=np.float64)
        lp.col_lower_ = np.asarray(self._lb, dtype=np.float64)
        lp.col_upper_ = np.asarray(self._ub, dtype=np.float64)
        lp.row_lower_ = np.asarray(self._row_lo, dtype=np.float64)
        lp.row_upper_ = np.asarray(self._row_hi, dtype=np.float64)
        start, index, value = self._csc()
        lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
        lp.a_matrix_.start_ = start
        lp.a_matrix_.index_ = index
        lp.a_matrix_.value_ = value
        lp.a_matrix_.num_col_ = self.num_columns
        lp.a_matrix_.num_row_ = self.num_rows
        is_mip = any(self._integer)
        if is_mip:
            lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                               for i in self._integer]
        h.passModel(lp)
        if warm is not None and is_mip:
            sol = highspy.HighsSolution()
            sol.col_value = [float(v) for v in warm]
            sol.value_valid = True
            h.setSolution(sol)
        h.run()
        model_status = h.getModelStatus()
        info = h.getInfo()
        S = highspy.HighsModelStatus
        has_point = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
        values = np.asarray(h.getSolution().col_value, dtype=np.float64) if has_point else None
        bound = None
        if is_mip and math.isfinite(info.mip_dual_bound):
            bound = float(info.mip_dual_bound)
        if model_status == S.kOptimal:
            status = "optimal"
        elif model_status in (S.kInfeasible,):
            status = "infeasible"
        elif model_status in (S.kUnbounded, S.kUnboundedOrInfeasible):
            status = "unbounded"
        elif model_status in (S.kTimeLimit, S.kIterationLimit, S.kSolutionLimit, S.kInterrupt,
                              S.kObjectiveBound, S.kObjectiveTarget):
            status = "feasible" if has_point else "no_solution"
        else:
            status = "error"
        return SolveResult("highs", status, None, bound, 0.0, values, h.modelStatusToString(model_status))

    def _solve_cbc(self, time_limit: float | None, gap: float, warm: np.ndarray | None) -> SolveResult:
        import pulp

        prob = pulp.LpProblem(_safe_name(self.name), pulp.LpMinimize)
        variables = []
        # PuLP >= 3.3 attaches variables to their problem (add_variable); older versions construct them
        make = getattr(prob, "add_variable", None) or pulp.LpVariable
        for i, (lb, ub, integer) in enumerate(zip(self._lb, self._ub, self._integer, strict=True)):
            variables.append(make(f"x{i}", lowBound=lb if math.isfinite(lb) else None,
                                  upBound=ub if math.isfinite(ub) else None,
                                  cat=pulp.LpInteger if integer else pulp.LpContinuous))
        prob.setObjective(pulp.LpAffineExpression([(variables[i], c) for i, c in enumerate(self._cost) if c]))
        per_row: list[list[tuple[object, float]]] = [[] for _ in range(self.num_rows)]
        for r, c, v in zip(self._rows, self._cols, self._vals, strict=True):
            per_row[r].append((variables[c], v))
        for r, terms in enumerate(per_row):
            lo, hi = self._row_lo[r], self._row_hi[r]
            expr = pulp.LpAffineExpression(_merge_terms(terms))
            if lo == hi:
                prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintEQ, f"r{r}", lo))
                continue
            if math.isfinite(lo):
                prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintGE, f"r{r}l", lo))
            if math.isfinite(hi):
                prob.addConstraint(pulp.LpConstraint(expr, pulp.LpConstraintLE, f"r{r}u", hi))
        if warm is not None:
            for var, val in zip(variables, warm, strict=True):
                var.setInitialValue(float(round(val)) if var.cat == pulp.LpInteger else float(val))
        with tempfile.TemporaryDirectory(prefix="collsynth-cbc-") as tmp:
            cmd = _cbc_command(pulp, msg=False, timeLimit=time_limit, gapRel=gap, warmStart=warm is not None,
                               threads=1, keepFiles=False)
            try:
                run = _run_cbc(pulp, cmd, prob, tmp, time_limit)
            except pulp.PulpSolverError as exc:
                return SolveResult("cbc", "error", None, None, 0.0, None, str(exc))
        if run.stopped_by == "killed":
            # CBC ignored SIGINT too and wrote nothing: only a feasible warm start is left to return, with
            # the root LP bound if the log got that far
            status = "feasible" if warm is not None else "no_solution"
            return SolveResult("cbc", status, None, _cbc_root_bound(run.log), 0.0, warm, run.message)
        values_list = [v.varValue for v in variables]
        values = None if any(v is None for v in values_list) else np.asarray(values_list, dtype=np.float64)
        sol = prob.sol_status
        if sol == pulp.LpSolutionOptimal:
            status = "optimal"
        elif sol == pulp.LpSolutionIntegerFeasible:
            status = "feasible"
        elif sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
            status = "infeasible"
        elif sol == pulp.LpSolutionUnbounded:
            status = "unbounded"
        else:
            status = "no_solution"
        if status == "no_solution":
            values = None
        if status in ("no_solution", "feasible") and warm is not None and (
                values is None or self.violation(values) > FEASIBILITY_TOL
                or self.objective_value(values) > self.objective_value(warm)):
            # stopped without a usable point better than the start we handed it: the start is still feasible
            status, values = "feasible", warm
        bound = _cbc_bound(run.log)
        if bound is None and status != "optimal":
            bound = _cbc_root_bound(run.log)
        message = pulp.LpStatus.get(prob.status, "")
        if run.message:
            message = f"{message}; {run.message}" if message else run.message
        return SolveResult("cbc", status, None, bound, 0.0, values, message)


# CBC checks its -sec limit only between the steps of its search, and some steps of a large model's root
# node check neither it nor SIGINT: on DGX-2 2-node AllGather (sk2, ~29k columns) the root LP took ~20 s
# and processing the MIP start minutes more, so a 60 s limit ran 143-490 s. PuLP's COIN_CMD waits on the
# process without a timeout, so the CBC process is run here (with the .mps/.mst files and options PuLP
# writes, and PuLP reading the .sol back): at the limit plus CBC_STOP_GRACE it gets SIGINT, on which the
# cbc program sets its node and time limits to zero, stops at its next check and writes its best solution
# ("Stopped on ctrl-c"); if it has not exited CBC_KILL_GRACE later it is killed and what it found is lost.
CBC_STOP_GRACE = 1.0
CBC_KILL_GRACE = 5.0


def stop_grace(solver: str) -> float:
    """How long after its time limit the solver may still run (CBC's process is stopped, then killed)."""
    return CBC_STOP_GRACE + CBC_KILL_GRACE if solver == "cbc" else 0.0


@dataclass(frozen=True)
class _CbcRun:
    log: str
    stopped_by: str  # "" (finished on its own) | "interrupted" (SIGINT) | "killed" (SIGKILL)
    message: str = ""


def _run_cbc(pulp, cmd, prob, tmp: str, time_limit: float | None) -> _CbcRun:
    """Solve `prob` with the CBC program of PuLP command `cmd`, enforcing `time_limit` in wall-clock time.

    Mirrors COIN_CMD.solve_CBC (PuLP 2.8-3.x), whose writeMPS/writesol/readsol_MPS are used as they are;
    only the process is started and stopped here. Raises pulp.PulpSolverError if CBC fails.
    """
    mps, mst, sol, log_path = (os.path.join(tmp, name) for name in ("model.mps", "start.mst", "model.sol", "cbc.log"))
    prob.fixObjective()  # as LpProblem.solve does: a constant objective gets PuLP's dummy variable
    vs, variable_names, constraint_names, _ = prob.writeMPS(mps, rename=1)
    args = [cmd.path, mps]
    if cmd.optionsDict.get("warmStart", False):
        cmd.writesol(mst, prob, vs, variable_names, constraint_names)
        args += ["-mips", mst]
    if time_limit is not None:
        args += ["-sec", str(time_limit)]
    for option in list(cmd.options) + cmd.getOptions():
        args += ("-" + option).split()
    args += ["-solve", "-printingOptions", "all", "-solution", sol]
    # line-buffered output (glibc's stdbuf) so that the log of a killed CBC is complete up to the kill
    stdbuf = shutil.which("stdbuf")
    if stdbuf is not None:
        args = [stdbuf, "-oL", *args]
    stopped_by = ""
    with open(log_path, "w") as log_file:
        # own session: a Ctrl-C at the terminal reaches only us, and the finally below stops CBC
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            try:
                proc.wait(timeout=None if time_limit is None else time_limit + CBC_STOP_GRACE)
            except subprocess.TimeoutExpired:
                stopped_by = "interrupted"
                proc.send_signal(signal.SIGINT)
                try:
                    proc.wait(timeout=CBC_KILL_GRACE)
                except subprocess.TimeoutExpired:
                    stopped_by = "killed"
                    proc.kill()
                    proc.wait()
        finally:
            if proc.poll() is None:  # we are being interrupted or failed: never leave CBC running
                proc.kill()
                proc.wait()
    log = Path(log_path).read_text(errors="replace")
    if stopped_by == "killed":
        return _CbcRun(log, stopped_by, f"CBC did not stop within {CBC_STOP_GRACE + CBC_KILL_GRACE:g} s of its "
                                        f"{time_limit:g} s time limit and was killed")
    if proc.returncode != 0 or not os.path.exists(sol):
        tail = " | ".join(log.strip().splitlines()[-3:])
        raise pulp.PulpSolverError(f"CBC failed (exit code {proc.returncode}): {tail}")
    status, values, _, _, _, sol_status = cmd.readsol_MPS(sol, prob, vs, variable_names, constraint_names)
    prob.assignVarsVals(values)
    prob.assignStatus(status, sol_status)
    message = "" if not stopped_by else f"CBC overran its {time_limit:g} s time limit and was stopped with SIGINT"
    return _CbcRun(log, stopped_by, message)


def _cbc_command(pulp, **options):
    """PuLP's bundled CBC (PULP_CBC_CMD, deprecated in PuLP 3.3 and gone in 4.0), else a CBC on the PATH."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        bundled = getattr(pulp, "PULP_CBC_CMD", None)
        if bundled is not None:
            cmd = bundled(**options)
            if cmd.available():
                return cmd
        cmd = pulp.COIN_CMD(**options)
    if not cmd.available():
        raise SolverError("CBC is not available: install PuLP with its bundled CBC (pulp<4) or pulp[cbc], or use "
                          "--solver highs")
    return cmd


def _merge_terms(terms: list[tuple[object, float]]) -> list[tuple[object, float]]:
    merged: dict[int, list] = {}
    for var, coef in terms:
        key = id(var)
        if key in merged:
            merged[key][1] += coef
        else:
            merged[key] = [var, coef]
    return [(v, c) for v, c in merged.values()]


_BOUND_RE = re.compile(r"^(?:Lower bound|Best possible)\s*:?\s*(-?[0-9.eE+\-]+)", re.MULTILINE)
_ROOT_LP_RE = re.compile(r"^Continuous objective value is\s+(-?[0-9.eE+\-]+)", re.MULTILINE)


def _cbc_bound(log: str) -> float | None:
    """CBC's proven lower bound from its log ("Lower bound:" in the summary), if it printed one."""
    found = _BOUND_RE.findall(log)
    for text in reversed(found):
        try:
            return float(text)
        except ValueError:
            continue
    return None


def _cbc_root_bound(log: str) -> float | None:
    """The value of the LP relaxation CBC solves first (before preprocessing and search), if it got there:
    a valid bound when CBC was stopped before printing its summary."""
    found = _ROOT_LP_RE.findall(log)
    try:
        return float(found[0]) if found else None
    except ValueError:
        return None


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "model"
