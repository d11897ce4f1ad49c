"""A Ctrl-C or SIGTERM inside a solver, for every command that runs one (issue 16): the command keeps its finished
work, exits 130 with one `interrupted` line and no traceback, and the frames the interrupt cut short are dropped
(core.signals.release_frames, from `_Main.invoke` and `keeping_finished_work`) before the command returns, so
nothing they held (z3 contexts, MILP models) is left to the cyclic collector: `z3_contexts_freed` pauses the
collector and checks the contexts; a marker object held only by the interrupted frame must be gone while the
runner's result, whose SystemExit chains back to the interrupt (through click's Abort), is still alive.

The interrupt is raised in place of a solver call (z3's check, the routing MILP, the cut bound's LP) at a point
fixed by a hook, in-process, so no case depends on timing. tests/cli/test_signals.py sends real signals."""

from __future__ import annotations

import json
import sqlite3
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from collsynth.cli import main
from collsynth.core.signals import Terminated

pytestmark = pytest.mark.usefixtures("z3_contexts_freed")

INTERRUPTS = [pytest.param(KeyboardInterrupt, id="SIGINT"), pytest.param(Terminated, id="SIGTERM")]
NDV2 = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
        "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
SKETCH = {"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [],
          "hyperparameters": {"input_chunkup": 1}}
# two items that each run a z3 frontier sweep in this process (serial build)
SMT_PLAN = """sizes = ["1KB"]
[[synthesizers]]
name = "smt"
kind = "pareto"
max_chunks = 1
[[targets]]
topology = "ring:4"
collectives = ["allgather", "reducescatter"]
library = false
"""


class _Marker:
    """Held only by the frame that the interrupt cuts short."""


class Interrupter:
    """Replaces solver calls: once `armed()` is true, the next call raises the interrupt instead of solving."""

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind
        self.markers: list[weakref.ref[_Marker]] = []
        self.armed: Callable[[], bool] = lambda: True

    def wrap(self, real: Callable[..., Any]) -> Callable[..., Any]:
        def solver_call(*args: Any, **kwargs: Any) -> Any:
            if not self.markers and self.armed():
                marker = _Marker()  # noqa: F841 (only this frame holds it)
                self.markers.append(weakref.ref(marker))
                raise self.kind("signal")
            return real(*args, **kwargs)
        return solver_call

    def in_z3_check(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import z3

        monkeypatch.setattr(z3.Solver, "check", self.wrap(z3.Solver.check))

    def after_first_record(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Armed once the catalog recorded a finished item."""
        from collsynth.catalog import db

        real, recorded = db.Catalog.record, []

        def record(catalog: Any, *args: Any, **kwargs: Any) -> Any:
            done = real(catalog, *args, **kwargs)
            recorded.append(1)
            return done
        monkeypatch.setattr(db.Catalog, "record", record)
        self.armed = lambda: bool(recorded)


def _chain(error: BaseException | None) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling (click's Abort is raised from the interrupt)."""
    found: list[BaseException] = []
    while error is not None and error not in found:
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def _stopped(result: Any, interrupter: Interrupter) -> None:
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output and result.output.strip().splitlines()[-1] == "interrupted"
    assert len(interrupter.markers) == 1, "the solver call was never interrupted"
    assert result.exc_info is not None and any(isinstance(e, KeyboardInterrupt) for e in _chain(result.exc_info[1]))
    assert interrupter.markers[0]() is None, "the interrupted frames outlived the command"


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_pareto(cli_runner, monkeypatch, tmp_path: Path, kind) -> None:
    import collsynth.synth.report as report

    stop = Interrupter(kind)
    stop.in_z3_check(monkeypatch)
    real, written = report.write_progress, []

    def write_progress(*args: Any) -> Any:
        written.append(1)
        return real(*args)
    monkeypatch.setattr(report, "write_progress", write_progress)
    stop.armed = lambda: bool(written)  # a point is saved: the next check is cut short
    result = cli_runner.invoke(main, ["synth", "pareto", "ring:4", "allgather", "--max-chunks", "2", "--report",
                                      str(tmp_path / "rep")])
    _stopped(result, stop)
    doc = json.loads((tmp_path / "rep" / "frontier.json").read_text())
    assert doc["stopped"] == "interrupted" and doc["points"]


@pytest.mark.parametrize("args", [["synth", "least-steps", "ring:4", "allgather"],
                                  ["synth", "instance", "ring:4", "allgather", "-c", "1", "-s", "3"]])
def test_commands_with_nothing_finished_to_keep(cli_runner, monkeypatch, tmp_path: Path, args) -> None:
    stop = Interrupter(KeyboardInterrupt)
    stop.in_z3_check(monkeypatch)
    result = cli_runner.invoke(main, [*args, "-o", str(tmp_path / "out.json")])
    _stopped(result, stop)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_auto_keeps_the_greedy_schedule_when_its_exact_stage_is_cut_short(cli_runner, monkeypatch, tmp_path: Path,
                                                                          kind) -> None:
    from collsynth.synth.cluster import auto

    monkeypatch.setattr(auto, "AT_BOUND", 0.0)  # never done early: the exact (z3) stage runs after the greedy
    stop = Interrupter(kind)
    stop.in_z3_check(monkeypatch)
    result = cli_runner.invoke(main, ["synth", "auto", "ring:6", "allgather", "-o", str(tmp_path / "out.json")])
    _stopped(result, stop)
    assert json.loads((tmp_path / "out.json").read_text())["steps"]


def test_greedy_keeps_its_schedule_when_the_bound_is_cut_short(cli_runner, monkeypatch, tmp_path: Path) -> None:
    from collsynth.cli import synth_scale

    stop = Interrupter(KeyboardInterrupt)
    monkeypatch.setattr(synth_scale, "cut_bound_us", stop.wrap(synth_scale.cut_bound_us))
    result = cli_runner.invoke(main, ["synth", "greedy", "ring:6", "allgather", "-o", str(tmp_path / "out.json")])
    _stopped(result, stop)
    assert json.loads((tmp_path / "out.json").read_text())["steps"]


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_milp_keeps_the_best_schedule_when_the_routing_milp_is_cut_short(cli_runner, monkeypatch, tmp_path: Path,
                                                                         kind) -> None:
    from collsynth.synth.milp import route_stages

    stop = Interrupter(kind)
    monkeypatch.setattr(route_stages, "routing_milp", stop.wrap(route_stages.routing_milp))
    (tmp_path / "topo.json").write_text(json.dumps(NDV2))
    (tmp_path / "sk.json").write_text(json.dumps(SKETCH))
    result = cli_runner.invoke(main, ["synth", "milp", str(tmp_path / "topo.json"), "allgather", "--sketch",
                                      str(tmp_path / "sk.json"), "--solver", "highs", "--taccl-costs", "-o",
                                      str(tmp_path / "out.json")])
    _stopped(result, stop)
    assert json.loads((tmp_path / "out.json").read_text())["provenance"]["interrupted"] is True


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_catalog_build_keeps_the_finished_item(cli_runner, monkeypatch, tmp_path: Path, kind) -> None:
    stop = Interrupter(kind)
    stop.in_z3_check(monkeypatch)
    stop.after_first_record(monkeypatch)
    (tmp_path / "plan.toml").write_text(SMT_PLAN)
    result = cli_runner.invoke(main, ["catalog", "build", str(tmp_path / "plan.toml"), "--db", str(tmp_path / "c.db")])
    _stopped(result, stop)
    with sqlite3.connect(tmp_path / "c.db") as db:
        assert db.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 1
        assert db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_regress_reports_the_finished_item(cli_runner, monkeypatch, tmp_path: Path) -> None:
    stop = Interrupter(KeyboardInterrupt)
    stop.in_z3_check(monkeypatch)
    stop.after_first_record(monkeypatch)
    (tmp_path / "suite.toml").write_text(SMT_PLAN)
    result = cli_runner.invoke(main, ["regress", "--suite", str(tmp_path / "suite.toml"), "--report",
                                      str(tmp_path / "rep"), "--update-baseline", "--baseline",
                                      str(tmp_path / "base.json")])
    _stopped(result, stop)
    assert "INTERRUPTED: 1 of 2 items finished" in result.output
    assert json.loads((tmp_path / "rep" / "results.json").read_text())["interrupted"] == "1 of 2 items finished"


def test_tune_stopped_in_its_frontier_sweep(cli_runner, monkeypatch, tmp_path: Path) -> None:
    stop = Interrupter(KeyboardInterrupt)
    stop.in_z3_check(monkeypatch)
    result = cli_runner.invoke(main, ["tune", "ring:4", "allgather", "--sizes", "1KB", "--synth", "--max-chunks", "1",
                                      "--no-library", "--report", str(tmp_path / "rep")])
    _stopped(result, stop)
    assert not (tmp_path / "rep").exists()  # stopped before any size was tuned: no report claims one
