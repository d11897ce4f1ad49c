"""Ctrl-C (SIGINT to the process group) and SIGTERM (to the process) for every long command: exit 130, one
`interrupted` line and no traceback, finished work kept where the command keeps any, nothing half-written, no
process left running, no leaked semaphore (issue 16). Each case stops a real process at a moment fixed by a
hook (tests/cli/signal_harness.py), so no case depends on the machine's speed; tests/cli/repeat_signals.sh runs
them all N times in a row."""

from __future__ import annotations

import json
import signal
import sqlite3
from pathlib import Path

import pytest
from signal_harness import sleep_after, stop_command

SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT"), pytest.param(signal.SIGTERM, id="SIGTERM")]
# In the normal suite only a few cases run (a fresh process each: seconds); `-m slow` runs them all.
SLOW_SIGNALS = [pytest.param(signal.SIGINT, id="SIGINT", marks=pytest.mark.slow),
                pytest.param(signal.SIGTERM, id="SIGTERM", marks=pytest.mark.slow)]
SIGINT_ONLY_IN_CI = [SIGNALS[0], SLOW_SIGNALS[1]]
SIGTERM_ONLY_IN_CI = [SLOW_SIGNALS[0], SIGNALS[1]]
SKETCH = next((p for p in (Path(__file__).resolve().parents[2].parent / "shared/examples/taccl/sketch/sk1-ndv2-n1.json",
                           Path("/work/shared/examples/taccl/sketch/sk1-ndv2-n1.json")) if p.is_file()), None)


def _clean_stop(stopped, tmp_path: Path) -> None:
    assert stopped.returncode == 130, (stopped.returncode, stopped.stderr)
    assert "Traceback" not in stopped.stderr and "leaked" not in stopped.stderr, stopped.stderr
    assert stopped.stderr.strip().splitlines()[-1] == "interrupted", stopped.stderr
    assert not stopped.survivors, f"processes left running: {stopped.survivors}"
    assert not [p for p in tmp_path.rglob("*") if ".tmp" in p.name], "a temporary file was left behind"


@pytest.mark.parametrize("signum", SLOW_SIGNALS)
def test_pareto_keeps_the_finished_points(tmp_path, signum):
    stopped = stop_command(sleep_after("collsynth.synth.report", "write_progress"),
                           ["synth", "pareto", "ring:3", "allgather", "--max-chunks", "2", "--report", "rep"],
                           signum, cwd=tmp_path)
    _clean_stop(stopped, tmp_path)
    doc = json.loads((tmp_path / "rep" / "frontier.json").read_text())
    assert doc["stopped"] == "interrupted" and doc["points"]


@pytest.mark.skipif(SKETCH is None, reason="needs ../shared/examples (TACCL sketches)")
@pytest.mark.parametrize("signum", SIGTERM_ONLY_IN_CI)
def test_milp_stops_cbc_and_keeps_the_best_schedule_so_far(tmp_path, signum):
    # the hook holds the driver while CBC runs (CBC has its own session: only our cleanup can stop it)
    hook = """
        import time
        from collsynth.encodings import milp_solvers
        _real = milp_solvers.DEFAULT_CBC_STOP.wait
        def _held(proc, timeout):
            print("ready", flush=True)
            time.sleep(60)
            return _real(proc, timeout)
        object.__setattr__(milp_solvers.DEFAULT_CBC_STOP, "wait", _held)
        """
    stopped = stop_command(hook, ["synth", "milp", "ndv2", "allgather", "--sketch", str(SKETCH), "--solver", "cbc",
                                  "-o", "out.json", "--report", "rep"], signum, cwd=tmp_path)
    _clean_stop(stopped, tmp_path)
    # stopped in the routing MILP: the greedy routings' best schedule, verified, is kept
    from collsynth.schedule import verify
    from collsynth.schedule.algorithm import Algorithm

    algorithm = Algorithm.load(tmp_path / "out.json")
    verify(algorithm)
    assert algorithm.provenance["interrupted"] is True and (tmp_path / "rep" / "report.md").is_file()


@pytest.mark.parametrize("signum", SIGINT_ONLY_IN_CI)
def test_greedy_writes_nothing_half_done(tmp_path, signum):
    # stopped inside the synthesizer: no schedule is finished, nothing is written
    stopped = stop_command(sleep_after("collsynth.synth.cluster.greedy", "greedy"),
                           ["synth", "greedy", "ring:8", "allgather", "-o", "out.json", "--report", "rep"], signum,
                           cwd=tmp_path)
    _clean_stop(stopped, tmp_path)
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("signum", SLOW_SIGNALS)
def test_auto_keeps_the_best_schedule_found_so_far(tmp_path, signum):
    # stopped after its first stage (the greedy) reported a schedule: that schedule is kept, marked interrupted
    hook = """
        import time
        from collsynth.synth.cluster import auto
        _real = auto._greedy
        def _held(run, seed):
            _real(run, seed)
            print("ready", flush=True)
            time.sleep(60)
        auto.STAGES["greedy"] = _held
        """
    stopped = stop_command(hook, ["synth", "auto", "ring:8", "allgather", "-o", "out.json", "--report", "rep"],
                           signum, cwd=tmp_path)
    _clean_stop(stopped, tmp_path)
    from collsynth.schedule import verify
    from collsynth.schedule.algorithm import Algorithm

    kept = Algorithm.load(tmp_path / "out.json")
    verify(kept)
    assert Algorithm.load(tmp_path / "rep" / "algorithm.json").to_json() == kept.to_json()
    assert "interrupted" in (tmp_path / "rep" / "summary.txt").read_text()
    assert not (tmp_path / "rep" / "bound.json").exists()


@pytest.mark.parametrize("signum", SLOW_SIGNALS)
def test_tune_keeps_the_sizes_already_tuned(tmp_path, signum):
    from collsynth.topologies import ring

    algo = tmp_path / "ring.json"
    algo.write_text(_ring_algorithm(ring(4)))
    stopped = stop_command(sleep_after("collsynth.tune.search", "tune_size", calls=2, before=True),
                           ["tune", "ring:4", "allgather", "--sizes", "1KB:64KB", "-a", str(algo), "--no-library",
                            "--report", "rep"], signum, cwd=tmp_path)
    _clean_stop(stopped, tmp_path)
    data = json.loads((tmp_path / "rep" / "tune.json").read_text())
    assert data["interrupted"] and [s["size"] for s in data["sizes"]] == [1024]


def _ring_algorithm(topology) -> str:
    from collsynth.collectives import make_collective
    from collsynth.synth.instance import synthesize_instance

    result = synthesize_instance(topology, make_collective("allgather", topology.num_ranks), 3)
    assert result.algorithm is not None
    return result.algorithm.to_json()


@pytest.mark.parametrize("signum", SLOW_SIGNALS)
def test_regress_in_parallel_leaves_no_worker_and_keeps_the_finished_items(tmp_path, signum):
    # stopped while the first item of a 2-process build is being recorded: the workers are running
    plan = tmp_path / "suite.toml"
    plan.write_text('sizes = ["1KB"]\n[[targets]]\ntopology = "ring:4"\ncollectives = ["allgather", "reducescatter"]\n')
    hook = """
        import time
        from collsynth.catalog import db
        _real = db.Catalog.record
        def _held(self, *args, **kwargs):
            result = _real(self, *args, **kwargs)
            print("ready", flush=True)
            time.sleep(60)
            return result
        db.Catalog.record = _held
        """
    stopped = stop_command(hook,
                           ["regress", "--suite", str(plan), "--jobs", "2", "--db", "cat.db", "--report", "rep",
                            "--update-baseline", "--baseline", "base.json"], signum, cwd=tmp_path)
    _clean_stop(stopped, tmp_path)
    assert not (tmp_path / "base.json").exists()  # a baseline is recorded only from a whole run
    with sqlite3.connect(tmp_path / "cat.db") as db:  # the item recorded before the signal stays, unclaimed
        assert db.execute("SELECT COUNT(*) FROM items").fetchone()[0] >= 1
        assert db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
    # the report judges the items finished, marked interrupted
    assert "INTERRUPTED (" in (tmp_path / "rep" / "report.md").read_text()
    assert json.loads((tmp_path / "rep" / "results.json").read_text())["entries"]
