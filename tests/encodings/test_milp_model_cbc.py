"""CBC through MilpModel: answers are checked, and a time limit holds even where CBC itself overruns it.

CBC checks its own limit only between search steps (the root LP and MIP-start processing of a large model
ran minutes past a 60 s limit), which no small model reproduces reliably; so the process control is
tested with stand-in `cbc` programs that ignore the limit, and the real CBC on small models. How the driver
waits is injected (`CbcStop.wait`): a wait that reports "still running" at once stands for a limit that
ran out, so no test here waits for a limit, reads the clock or relies on a timer's signal.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from collsynth.encodings import milp_model
from collsynth.encodings.milp_model import MilpModel
from collsynth.encodings.milp_solvers import CbcStop

pulp = pytest.importorskip("pulp")
STAND_IN_EXIT_S = 60  # a safety net only: a stand-in told to exit on SIGINT does so within one `sleep 0.05`

def knapsack() -> MilpModel:
    """max 10a + 13b + 7c + 8d s.t. 5a + 6b + 4c + 3d <= 10, binary: optimum b + d = 21."""
    model = MilpModel("knapsack")
    x = model.add_binaries(4)
    for j, profit in zip(x, (10, 13, 7, 8), strict=True):
        model.set_cost(j, -profit)
    model.add_row("capacity", list(x), [5, 6, 4, 3], hi=10)
    return model


def random_cover(columns: int, rows: int, density: float, seed: int = 0) -> MilpModel:
    """Weighted set covering: min c.x s.t. every row is covered at least once."""
    rng = np.random.default_rng(seed)
    model = MilpModel("cover")
    x = model.add_binaries(columns)
    for j, c in zip(x, rng.integers(1, 100, size=columns), strict=True):
        model.set_cost(j, float(c))
    for _ in range(rows):
        cols = np.flatnonzero(rng.random(columns) < density).tolist() or [int(rng.integers(columns))]
        model.add_row("cover", cols, [1.0] * len(cols), lo=1.0)
    return model


def child_pids() -> set[int]:
    """Live children of this process (Linux /proc); empty elsewhere."""
    found = set()
    for entry in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = entry.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == os.getpid() and fields[0] != "Z":
            found.add(int(entry.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def fake_cbc(tmp_path: Path, on_sigint: str) -> tuple[Path, object]:
    """A stand-in `cbc` that ignores its time limit, records its pid, and on SIGINT runs `on_sigint`; returns the
    pid file and the command factory to inject. A shell cannot trap a signal it was started with ignored (POSIX),
    and a child inherits an ignored SIGINT from a runner without job control (a background job): the tests that
    use it run with Python's own SIGINT handler (`ctrl_c_raises`), which the child sees as the default."""
    pid_file = tmp_path / "cbc.pid"
    script = tmp_path / "cbc"
    script.write_text(f"""#!/bin/sh
for a in "$@"; do [ "$prev" = "-solution" ] && sol=$a; prev=$a; done
trap '{on_sigint}' INT
echo "Continuous objective value is -30 - 0.01 seconds"
echo $$ > "{pid_file}.tmp" && mv "{pid_file}.tmp" "{pid_file}"
while :; do sleep 0.05; done
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def command(pulp_module, **options):
        return pulp_module.COIN_CMD(path=str(script), **options)

    return pid_file, command


def _wait_until_started(pid_file: Path, proc: subprocess.Popen) -> None:
    # the stand-in has set its SIGINT trap once its pid file exists (no time limit involved: it will appear)
    while not pid_file.exists() and proc.poll() is None:
        os.sched_yield()


def overrun_then_wait(pid_file: Path):
    """The first wait (for the time limit) reports an overrun; later waits wait for the process to exit (a stand-in
    that did not stop on SIGINT fails the test after STAND_IN_EXIT_S instead of hanging it)."""
    calls = []

    def wait(proc: subprocess.Popen, timeout: float | None) -> bool:
        calls.append(timeout)
        if len(calls) == 1:
            _wait_until_started(pid_file, proc)
            return False
        proc.wait(STAND_IN_EXIT_S)
        return True

    return wait


def never_exits(pid_file: Path):
    """Every wait runs out: the process neither meets its limit nor stops on SIGINT."""
    def wait(proc: subprocess.Popen, timeout: float | None) -> bool:
        _wait_until_started(pid_file, proc)
        return False

    return wait


def interrupted(pid_file: Path):
    """The user presses Ctrl-C while the driver waits."""
    def wait(proc: subprocess.Popen, timeout: float | None) -> bool:
        _wait_until_started(pid_file, proc)
        raise KeyboardInterrupt

    return wait


def test_small_model_solves_to_optimal():
    result = knapsack().solve("cbc", time_limit=30)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(-21.0)
    assert result.gap == 0.0
    np.testing.assert_allclose(result.values, [0, 1, 0, 1])


def test_optimal_from_a_warm_start_and_infeasible():
    result = knapsack().solve("cbc", warm_start=np.array([1.0, 0.0, 0.0, 0.0]))
    assert result.status == "optimal" and result.objective == pytest.approx(-21.0)
    infeasible = MilpModel("infeasible")
    y = infeasible.add_binaries(2)
    infeasible.add_row("too_many", list(y), [1, 1], lo=3)
    assert infeasible.solve("cbc").status == "infeasible"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="lists child processes through /proc")
def test_time_limited_real_cbc_returns_checked_answer_and_no_child():
    # whatever a loaded machine lets CBC reach in its limit, the answer is checked and no process is left
    model = random_cover(3000, 1500, 0.01)
    before = child_pids()
    result = model.solve("cbc", time_limit=1.0)
    assert result.status in ("optimal", "feasible", "no_solution")
    if result.has_solution:
        assert model.violation(result.values) <= milp_model.FEASIBILITY_TOL
        assert result.bound is not None and result.bound <= result.objective + 1e-6
    assert child_pids() <= before


@pytest.mark.usefixtures("ctrl_c_raises")
def test_overrunning_cbc_is_interrupted_and_its_solution_read(tmp_path):
    # on SIGINT the stand-in writes what CBC writes when stopped: its status line, then no nonzero values
    pid_file, command = fake_cbc(tmp_path, 'echo "Stopped on ctrl-c - objective value 0" > "$sol"; exit 0')
    result = knapsack().solve("cbc", time_limit=0.5, cbc=CbcStop(wait=overrun_then_wait(pid_file), command=command))
    assert result.status == "feasible"
    np.testing.assert_allclose(result.values, [0, 0, 0, 0])
    assert result.bound == pytest.approx(-30.0)  # no summary printed: the root LP bound
    assert "SIGINT" in result.message
    assert not alive(int(pid_file.read_text()))


@pytest.mark.usefixtures("ctrl_c_raises")
def test_cbc_ignoring_sigint_is_killed_and_warm_start_kept(tmp_path):
    pid_file, command = fake_cbc(tmp_path, "")  # '' traps SIGINT to nothing: it is ignored
    warm = np.array([0.0, 1.0, 1.0, 0.0])
    result = knapsack().solve("cbc", time_limit=0.5, warm_start=warm,
                              cbc=CbcStop(wait=never_exits(pid_file), command=command))
    assert result.status == "feasible" and result.objective == pytest.approx(-20.0)
    np.testing.assert_allclose(result.values, warm)
    assert result.bound == pytest.approx(-30.0)
    assert "killed" in result.message
    assert not alive(int(pid_file.read_text()))
    # without a start there is nothing to return
    pid_file.unlink()
    stop = CbcStop(wait=never_exits(pid_file), command=command)
    assert knapsack().solve("cbc", time_limit=0.5, cbc=stop).status == "no_solution"


@pytest.mark.usefixtures("ctrl_c_raises")
def test_keyboard_interrupt_stops_cbc(tmp_path):
    pid_file, command = fake_cbc(tmp_path, "")
    with pytest.raises(KeyboardInterrupt):
        knapsack().solve("cbc", time_limit=60, cbc=CbcStop(wait=interrupted(pid_file), command=command))
    assert not alive(int(pid_file.read_text()))
