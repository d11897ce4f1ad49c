"""The solver drivers: HiGHS (highspy, directly) and CBC (PuLP's CBC program), on one `LpMatrix`.

    solve_matrix(matrix, "highs", time_limit=10, gap=1e-4, warm=None) -> SolveResult (unchecked)

`MilpModel.solve` checks what comes back against the model's rows (drivers do not):
- PuLP reports a time-limited HiGHS run as "Optimal", so HiGHS is driven through highspy, whose model
  status, primal solution status and dual bound are read directly;
- CBC without a solution returns junk values (checked by the caller), and its proven bound is read from
  its log;
- CBC overruns its own time limit in its root node on large models, so its process is stopped here
  (SIGINT, then SIGKILL) shortly after the limit (`CbcStop`, `_run_cbc`). How the process is waited on
  is injectable (`CbcStop.wait`), so the stop logic is tested without real waiting or signals from timers.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from collsynth.core.errors import CollsynthError

SOLVERS = ("cbc", "highs")
# How long one wait for HiGHS lasts before the next: only bounds the wait's granularity (a signal ends it at once).
HIGHS_WAIT_S = 1.0

# CBC checks its -sec limit only between the steps of its search, and some steps of a large model's root
# node check neither it nor SIGINT: on DGX-2 2-node AllGather (sk2, ~29k columns) the root LP took ~20 s
# and processing the MIP start minutes more, so a 60 s limit ran 143-490 s. PuLP's COIN_CMD waits on the
# process without a timeout (checked on PuLP 3.3.2: its `timeLimit` only becomes CBC's `-sec` option and
# `actualSolve` then calls `cbc.wait()` with no timeout and no kill), so the CBC process is run here
# (with the .mps/.mst files and options PuLP writes, and PuLP reading the .sol back): at the limit plus
# the stop grace it gets SIGINT, on which the cbc program sets its node and time limits to zero, stops at
# its next check and writes its best solution ("Stopped on ctrl-c"); if it has not exited the kill grace
# later it is killed and what it found is lost.
CBC_STOP_GRACE = 1.0
CBC_KILL_GRACE = 5.0
GAP_FLOOR = 1e-12  # a relative gap never divides by less than this (an objective of 0)


class SolverError(CollsynthError):
    """A solver that is missing, failed, or was asked for something it cannot do."""


def stop_grace(solver: str) -> float:
    """How long after its time limit the solver may still run (CBC's process is stopped, then killed)."""
    return CBC_STOP_GRACE + CBC_KILL_GRACE if solver == "cbc" else 0.0


@dataclass(frozen=True)
class LpMatrix:
    """min cost.x s.t. row_lo <= A x <= row_hi, lb <= x <= ub, x[integer] integral; A in CSC form."""

    name: str
    cost: np.ndarray
    lb: np.ndarray
    ub: np.ndarray
    integer: np.ndarray  # bool per column
    row_lo: np.ndarray
    row_hi: np.ndarray
    start: np.ndarray  # CSC column starts (num_columns + 1)
    index: np.ndarray  # CSC row indices
    value: np.ndarray  # CSC values (duplicates merged)

    @property
    def num_columns(self) -> int:
        return len(self.cost)

    @property
    def num_rows(self) -> int:
        return len(self.row_lo)


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
        return max(0.0, (self.objective - self.bound) / max(abs(self.objective), GAP_FLOOR))


def wait_for_exit(proc: subprocess.Popen[bytes], timeout: float | None) -> bool:
    """Wait up to `timeout` seconds (None: for ever); True when the process has exited."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


@dataclass(frozen=True)
class CbcStop:
    """How a CBC process that overruns its limit is stopped: SIGINT `stop_grace` s after the limit, SIGKILL
    `kill_grace` s after that. `wait(proc, timeout)` is how the driver waits (injectable for tests);
    `command(**options)` makes PuLP's CBC command (injectable: a stand-in program)."""

    stop_grace: float = CBC_STOP_GRACE
    kill_grace: float = CBC_KILL_GRACE
    wait: Callable[[subprocess.Popen[bytes], float | None], bool] = wait_for_exit
    command: Callable[..., Any] | None = None


DEFAULT_CBC_STOP = CbcStop()


def solve_matrix(matrix: LpMatrix, solver: str, *, time_limit: float | None, gap: float, warm: np.ndarray | None,
                 cbc: CbcStop = DEFAULT_CBC_STOP) -> SolveResult:
    """One solve by `solver`; the answer is NOT checked here (MilpModel.solve does)."""
    if solver == "highs":
        return _solve_highs(matrix, time_limit, gap, warm)
    if solver == "cbc":
        return _solve_cbc(matrix, time_limit, gap, warm, cbc)
    raise SolverError(f"unknown solver {solver!r}; use cbc or highs")


# --- HiGHS ------------------------------------------------------------------------------------------

def _quiet_highs() -> Any:
    """A HiGHS instance with its output off. HiGHS prints its banner on stdout (fd 1, from C++) when it is
    constructed, before any option can turn output off; `--json` output must stay one document per line."""
    import highspy

    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        h = highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)
    h.setOptionValue("output_flag", False)
    return h


def _solve_highs(m: LpMatrix, time_limit: float | None, gap: float, warm: np.ndarray | None) -> SolveResult:
    import highspy

    h = _quiet_highs()
    h.setOptionValue("random_seed", 0)
    h.setOptionValue("mip_rel_gap", float(gap))
    if time_limit is not None:
        h.setOptionValue("time_limit", float(time_limit))
    h.passModel(_highs_lp(m))
    is_mip = bool(m.integer.any())
    if warm is not None and is_mip:
        sol = highspy.HighsSolution()
        sol.col_value = [float(v) for v in warm]
        sol.value_valid = True
        h.setSolution(sol)
    _run_interruptible(h)
    model_status = h.getModelStatus()
    info = h.getInfo()
    has_point = info.primal_solution_status == highspy.SolutionStatus.kSolutionStatusFeasible
    values = np.asarray(h.getSolution().col_value, dtype=np.float64) if has_point else None
    bound = float(info.mip_dual_bound) if is_mip and math.isfinite(info.mip_dual_bound) else None
    status = _highs_status(model_status, has_point)
    return SolveResult("highs", status, None, bound, 0.0, values, h.modelStatusToString(model_status))


def _run_interruptible(h: Any) -> None:
    """`h.run()`, stopped by Ctrl-C or SIGTERM. HiGHS runs in a thread of its own while this one waits (a wait
    that a signal's handler interrupts at once; in `run()` itself the signal would wait for HiGHS to finish, up to
    its time limit). On the interrupt HiGHS is told to stop, through its user-interrupt callback, which runs in
    HiGHS's thread (where no signal handler can raise), and is waited for; then the interrupt goes on."""
    h.HandleUserInterrupt = True
    h.startSolve()
    try:
        while not h.wait(HIGHS_WAIT_S)[0]:
            pass
    except BaseException:
        h.cancelSolve()
        h.wait()  # HiGHS stops at its next callback (a second Ctrl-C leaves it to end with the process)
        raise


def _highs_lp(m: LpMatrix) -> Any:
    import highspy

    lp = highspy.HighsLp()
    lp.num_col_ = m.num_columns
    lp.num_row_ = m.num_rows
    lp.col_cost_ = m.cost
    lp.col_lower_ = m.lb
    lp.col_upper_ = m.ub
    lp.row_lower_ = m.row_lo
    lp.row_upper_ = m.row_hi
    lp.a_matrix_.format_ = highspy.MatrixFormat.kColwise
    lp.a_matrix_.start_ = m.start
    lp.a_matrix_.index_ = m.index
    lp.a_matrix_.value_ = m.value
    lp.a_matrix_.num_col_ = m.num_columns
    lp.a_matrix_.num_row_ = m.num_rows
    if m.integer.any():
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in m.integer]
    return lp


def _highs_status(model_status: Any, has_point: bool) -> str:
    import highspy

    S = highspy.HighsModelStatus
    if model_status == S.kOptimal:
        return "optimal"
    if model_status == S.kInfeasible:
        return "infeasible"
    if model_status in (S.kUnbounded, S.kUnboundedOrInfeasible):
        return "unbounded"
    if model_status in (S.kTimeLimit, S.kIterationLimit, S.kSolutionLimit, S.kInterrupt, S.kObjectiveBound,
                        S.kObjectiveTarget):
        return "feasible" if has_point else "no_solution"
    return "error"


# --- CBC --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _CbcRun:
    log: str
    stopped_by: str  # "" (finished on its own) | "interrupted" (SIGINT) | "killed" (SIGKILL)
    message: str = ""


def _pulp_problem(m: LpMatrix, warm: np.ndarray | None) -> tuple[Any, list[Any]]:
    """The matrix as a PuLP problem: one variable per column, one constraint per finite row side."""
    import pulp  # type: ignore[import-untyped]

    prob = pulp.LpProblem(re.sub(r"[^A-Za-z0-9_]", "_", m.name) or "model", pulp.LpMinimize)
    # PuLP >= 3.3 attaches variables to their problem (add_variable); older versions construct them
    make = getattr(prob, "add_variable", None) or pulp.LpVariable
    variables = [make(f"x{j}", lowBound=lb if math.isfinite(lb) else None, upBound=ub if math.isfinite(ub) else None,
                      cat=pulp.LpInteger if integer else pulp.LpContinuous)
                 for j, (lb, ub, integer) in enumerate(zip(m.lb, m.ub, m.integer, strict=True))]
    prob.setObjective(pulp.lpSum(c * variables[j] for j, c in enumerate(m.cost) if c))
    per_row: list[list[tuple[Any, float]]] = [[] for _ in range(m.num_rows)]
    for j in range(m.num_columns):
        for k in range(m.start[j], m.start[j + 1]):
            per_row[m.index[k]].append((variables[j], float(m.value[k])))
    for r, terms in enumerate(per_row):
        lo, hi = float(m.row_lo[r]), float(m.row_hi[r])
        expr = pulp.LpAffineExpression(terms)
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
    return prob, variables


def _solve_cbc(m: LpMatrix, time_limit: float | None, gap: float, warm: np.ndarray | None,
               stop: CbcStop) -> SolveResult:
    import pulp  # type: ignore[import-untyped]

    prob, variables = _pulp_problem(m, warm)
    with tempfile.TemporaryDirectory(prefix="collsynth-cbc-") as tmp:
        make = stop.command or _cbc_command
        cmd = make(pulp, msg=False, timeLimit=time_limit, gapRel=gap, warmStart=warm is not None, threads=1,
                   keepFiles=False)
        try:
            run = _run_cbc(pulp, cmd, prob, tmp, time_limit, stop)
        except pulp.PulpSolverError as exc:
            return SolveResult("cbc", "error", None, None, 0.0, None, str(exc))
    if run.stopped_by == "killed":
        # CBC ignored SIGINT too and wrote nothing: only a feasible warm start is left to return, with the root
        # LP bound if the log got that far
        status = "feasible" if warm is not None else "no_solution"
        return SolveResult("cbc", status, None, _cbc_root_bound(run.log), 0.0, warm, run.message)
    values_list = [v.varValue for v in variables]
    values = None if any(v is None for v in values_list) else np.asarray(values_list, dtype=np.float64)
    status = _cbc_status(pulp, prob)
    bound = _cbc_bound(run.log)
    if bound is None and status != "optimal":
        bound = _cbc_root_bound(run.log)
    message = "; ".join(x for x in (pulp.LpStatus.get(prob.status, ""), run.message) if x)
    return SolveResult("cbc", status, None, bound, 0.0, None if status == "no_solution" else values, message)


def _cbc_status(pulp: Any, prob: Any) -> str:
    sol = prob.sol_status
    if sol == pulp.LpSolutionOptimal:
        return "optimal"
    if sol == pulp.LpSolutionIntegerFeasible:
        return "feasible"
    if sol == pulp.LpSolutionInfeasible or prob.status == pulp.LpStatusInfeasible:
        return "infeasible"
    if sol == pulp.LpSolutionUnbounded:
        return "unbounded"
    return "no_solution"


def _cbc_args(cmd: Any, prob: Any, tmp: str, time_limit: float | None) -> tuple[list[str], str, tuple[Any, ...]]:
    """The CBC command line for `prob` (model and start files written to `tmp`), the solution path and what
    PuLP needs to read the solution back."""
    mps, mst, sol = (os.path.join(tmp, name) for name in ("model.mps", "start.mst", "model.sol"))
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
    return ([stdbuf, "-oL", *args] if stdbuf is not None else args), sol, (vs, variable_names, constraint_names)


def _run_cbc(pulp: Any, cmd: Any, prob: Any, tmp: str, time_limit: float | None, stop: CbcStop) -> _CbcRun:
    """Solve `prob` with the CBC program of PuLP command `cmd`, stopping it per `stop` after `time_limit`.

    Mirrors COIN_CMD.solve_CBC (PuLP 2.8-3.x), whose writeMPS/writesol/readsol_MPS are used as they are;
    only the process is started and stopped here. Raises pulp.PulpSolverError if CBC fails."""
    args, sol, names = _cbc_args(cmd, prob, tmp, time_limit)
    log_path = os.path.join(tmp, "cbc.log")
    stopped_by = ""
    with open(log_path, "w") as log_file:
        # own session: a Ctrl-C at the terminal reaches only us, and the finally below stops CBC
        proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            if not stop.wait(proc, None if time_limit is None else time_limit + stop.stop_grace):
                stopped_by = "interrupted"
                proc.send_signal(signal.SIGINT)
                if not stop.wait(proc, stop.kill_grace):
                    stopped_by = "killed"
                    proc.kill()
                    proc.wait()
        finally:
            if proc.poll() is None:  # we are being interrupted or failed: never leave CBC running
                proc.kill()
                proc.wait()
    log = Path(log_path).read_text(errors="replace")
    if stopped_by == "killed":
        return _CbcRun(log, stopped_by, f"CBC did not stop within {stop.stop_grace + stop.kill_grace:g} s of its "
                                        f"{time_limit:g} s time limit and was killed")
    if proc.returncode != 0 or not os.path.exists(sol):
        tail = " | ".join(log.strip().splitlines()[-3:])
        raise pulp.PulpSolverError(f"CBC failed (exit code {proc.returncode}): {tail}")
    status, values, _, _, _, sol_status = cmd.readsol_MPS(sol, prob, *names)
    prob.assignVarsVals(values)
    prob.assignStatus(status, sol_status)
    message = "" if not stopped_by else f"CBC overran its {time_limit:g} s time limit and was stopped with SIGINT"
    return _CbcRun(log, stopped_by, message)


def _cbc_command(pulp: Any, **options: Any) -> Any:
    """PuLP's bundled CBC (PULP_CBC_CMD, deprecated in PuLP 3.3 and gone in 4.0), else a CBC on the PATH."""
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


_BOUND_RE = re.compile(r"^(?:Lower bound|Best possible)\s*:?\s*(-?[0-9.eE+\-]+)", re.MULTILINE)
_ROOT_LP_RE = re.compile(r"^Continuous objective value is\s+(-?[0-9.eE+\-]+)", re.MULTILINE)


def _cbc_bound(log: str) -> float | None:
    """CBC's proven lower bound from its log ("Lower bound:" in the summary), if it printed one."""
    for text in reversed(_BOUND_RE.findall(log)):
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
