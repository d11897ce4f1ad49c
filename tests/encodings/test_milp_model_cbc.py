"""CBC through MilpModel: answers are checked, and a time limit holds even where CBC itself overruns it.

CBC checks its own limit only between search steps (the root LP and MIP-start processing of a large model
ran minutes past a 60 s limit), which no small model reproduces reliably; so the process control is
tested with stand-in `cbc` programs that ignore the limit, and the real CBC on small models.
"""

from __future__ import annotations

import _thread
import os
import stat
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from collsynth.encodings import milp_model
from collsynth.encodings.milp_model import CBC_KILL_GRACE, CBC_STOP_GRACE, MilpModel

pulp = pytest.importorskip("pulp")

SLACK = 3.0  # s for writing and reading files on a loaded machine


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


def fake_cbc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, on_sigint: str) -> Path:
    """A stand-in `cbc` that ignores its time limit, records its pid, and on SIGINT runs `on_sigint`."""
    pid_file = tmp_path / "cbc.pid"
    script = tmp_path / "cbc"
    script.write_text(f"""#!/bin/sh
for a in "$@"; do [ "$prev" = "-solution" ] && sol=$a; prev=$a; done
echo $$ > "{pid_file}"
echo "Continuous objective value is -30 - 0.01 seconds"
trap '{on_sigint}' INT
while :; do sleep 0.05; done
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)

    def command(pulp_module, **options):
        return pulp_module.COIN_CMD(path=str(script), **options)

    monkeypatch.setattr(milp_model, "_cbc_command", command)
    return pid_file


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
    model = random_cover(3000, 1500, 0.01)
    before = child_pids()
    started = time.perf_counter()
    result = model.solve("cbc", time_limit=1.0)
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0 + CBC_STOP_GRACE + CBC_KILL_GRACE + SLACK
    assert result.status in ("optimal", "feasible", "no_solution")
    if result.has_solution:
        assert model.violation(result.values) <= milp_model.FEASIBILITY_TOL
        assert result.bound is not None and result.bound <= result.objective + 1e-6
    assert child_pids() <= before


def test_overrunning_cbc_is_interrupted_and_its_solution_read(tmp_path, monkeypatch):
    # on SIGINT the stand-in writes what CBC writes when stopped: its status line, then no nonzero values
    pid_file = fake_cbc(tmp_path, monkeypatch, 'echo "Stopped on ctrl-c - objective value 0" > "$sol"; exit 0')
    started = time.perf_counter()
    result = knapsack().solve("cbc", time_limit=0.5)
    assert time.perf_counter() - started < 0.5 + CBC_STOP_GRACE + SLACK
    assert result.status == "feasible"
    np.testing.assert_allclose(result.values, [0, 0, 0, 0])
    assert result.bound == pytest.approx(-30.0)  # no summary printed: the root LP bound
    assert "SIGINT" in result.message
    assert not alive(int(pid_file.read_text()))


def test_cbc_ignoring_sigint_is_killed_and_warm_start_kept(tmp_path, monkeypatch):
    pid_file = fake_cbc(tmp_path, monkeypatch, "")  # '' traps SIGINT to nothing: it is ignored
    monkeypatch.setattr(milp_model, "CBC_KILL_GRACE", 0.5)
    warm = np.array([0.0, 1.0, 1.0, 0.0])
    started = time.perf_counter()
    result = knapsack().solve("cbc", time_limit=0.5, warm_start=warm)
    assert time.perf_counter() - started < 0.5 + CBC_STOP_GRACE + 0.5 + SLACK
    assert result.status == "feasible" and result.objective == pytest.approx(-20.0)
    np.testing.assert_allclose(result.values, warm)
    assert result.bound == pytest.approx(-30.0)
    assert "killed" in result.message
    assert not alive(int(pid_file.read_text()))
    # without a start there is nothing to return
    assert knapsack().solve("cbc", time_limit=0.5).status == "no_solution"


def test_keyboard_interrupt_stops_cbc(tmp_path, monkeypatch):
    pid_file = fake_cbc(tmp_path, monkeypatch, "")
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            knapsack().solve("cbc", time_limit=60)
    finally:
        timer.cancel()
    assert not alive(int(pid_file.read_text()))
