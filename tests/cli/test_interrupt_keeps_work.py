"""Ctrl-C (or SIGTERM) keeps what is finished (issue 16): `synth milp` writes the best verified schedule so far,
`synth auto` the best candidate found so far, `synth greedy`/`trees` a finished schedule whose report was being
written, `regress` the cases finished (report marked interrupted); each exits 130 with no traceback. The
interrupt is raised by a hook at a fixed point of the pipeline (in-process), so no case depends on timing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from collsynth.cli import main
from collsynth.core.signals import Terminated
from collsynth.schedule import verify
from collsynth.schedule.algorithm import Algorithm

INTERRUPTS = [pytest.param(KeyboardInterrupt, id="SIGINT"), pytest.param(Terminated, id="SIGTERM")]

NDV2 = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
        "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
SKETCH = {"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [],
          "hyperparameters": {"input_chunkup": 1}}


def _raiser(kind: type[BaseException]):
    def stop(*args, **kwargs):
        raise kind("signal")
    return stop


def _interrupted(result) -> None:
    assert result.exit_code == 130, result.output
    assert "Traceback" not in result.output and result.output.strip().splitlines()[-1] == "interrupted"


@pytest.fixture
def milp_files(tmp_path: Path) -> tuple[Path, Path]:
    (tmp_path / "topo.json").write_text(json.dumps(NDV2))
    (tmp_path / "sk.json").write_text(json.dumps(SKETCH))
    return tmp_path / "topo.json", tmp_path / "sk.json"


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_milp_keeps_the_best_verified_schedule_so_far(cli_runner, monkeypatch, tmp_path, milp_files, kind) -> None:
    from collsynth.synth.milp import route_stages

    monkeypatch.setattr(route_stages, "routing_milp", _raiser(kind))  # stopped while the routing MILP runs
    topo, sketch = milp_files
    result = cli_runner.invoke(main, ["synth", "milp", str(topo), "allgather", "--sketch", str(sketch), "--solver",
                                      "highs", "--taccl-costs", "-o", str(tmp_path / "out.json"), "--report",
                                      str(tmp_path / "rep")])
    _interrupted(result)
    assert "kept the best verified schedule found so far" in result.output
    algorithm = Algorithm.load(tmp_path / "out.json")  # the greedy routings' best, list-scheduled
    verify(algorithm)
    assert algorithm.provenance["interrupted"] is True and algorithm.provenance["predicted_us"] > 0
    assert (tmp_path / "rep" / "report.md").is_file()
    assert [s["stage"] for s in algorithm.provenance["stages"]][-2:] == ["interrupted", "verify"]


def test_milp_interrupted_before_any_schedule_of_the_collective_writes_nothing(cli_runner, monkeypatch, tmp_path,
                                                                               milp_files) -> None:
    # ReduceScatter is scheduled as the reversal of an AllGather: an interrupt in the AllGather's routing has
    # no ReduceScatter schedule in hand
    from collsynth.synth.milp import route_stages

    monkeypatch.setattr(route_stages, "routing_milp", _raiser(KeyboardInterrupt))
    topo, sketch = milp_files
    result = cli_runner.invoke(main, ["synth", "milp", str(topo), "reducescatter", "--sketch", str(sketch),
                                      "--solver", "highs", "--taccl-costs", "-o", str(tmp_path / "out.json")])
    _interrupted(result)
    assert not (tmp_path / "out.json").exists()


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_auto_keeps_the_best_candidate_found_before_the_interrupt(cli_runner, monkeypatch, tmp_path, kind) -> None:
    from collsynth.synth.cluster import auto

    monkeypatch.setattr(auto, "AT_BOUND", 0.0)  # never done early: the run goes on to the next stage
    monkeypatch.setitem(auto.STAGES, "exact", _raiser(kind))  # after the greedy stage: interrupted in the next
    result = cli_runner.invoke(main, ["synth", "auto", "ring:6", "allgather", "-o", str(tmp_path / "out.json"),
                                      "--report", str(tmp_path / "rep")])
    _interrupted(result)
    kept = Algorithm.load(tmp_path / "out.json")
    verify(kept)
    assert kept.to_json() == (tmp_path / "rep" / "algorithm.json").read_text()
    summary = (tmp_path / "rep" / "summary.txt").read_text()
    assert re.search(r"best so far: (greedy|rechunk|reseed)", summary) and "interrupted" in summary


def test_auto_interrupted_before_any_candidate_writes_nothing(cli_runner, monkeypatch, tmp_path) -> None:
    from collsynth.synth.cluster import auto

    monkeypatch.setitem(auto.STAGES, "greedy", _raiser(KeyboardInterrupt))
    result = cli_runner.invoke(main, ["synth", "auto", "ring:6", "allgather", "-o", str(tmp_path / "out.json"),
                                      "--report", str(tmp_path / "rep")])
    _interrupted(result)
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "rep").exists()


@pytest.mark.parametrize("command", ["greedy", "trees"])
def test_a_finished_schedule_is_kept_when_the_interrupt_comes_during_its_report(cli_runner, monkeypatch, tmp_path,
                                                                               command) -> None:
    from collsynth.cli import synth_scale

    monkeypatch.setattr(synth_scale, "cut_bound_us", _raiser(KeyboardInterrupt))  # the bound comes after it
    result = cli_runner.invoke(main, ["synth", command, "ring:6", "allgather", "-o", str(tmp_path / "out.json"),
                                      "--report", str(tmp_path / "rep")])
    _interrupted(result)
    verify(Algorithm.load(tmp_path / "out.json"))
    assert "interrupted" in (tmp_path / "rep" / "summary.txt").read_text()
    assert not (tmp_path / "rep" / "bound.json").exists()  # the bound was not computed: no file claims one


SUITE = 'sizes = ["1KB", "1MB"]\n[[targets]]\ntopology = "ring:4"\ncollectives = ["allgather", "reducescatter"]\n'


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_regress_reports_the_cases_finished_marked_interrupted(cli_runner, monkeypatch, tmp_path, kind) -> None:
    from collsynth.catalog import pipeline

    real, calls = pipeline.run_item, []

    def second_item_interrupted(item):
        calls.append(item.key)
        if len(calls) == 2:
            raise kind("signal")
        return real(item)

    monkeypatch.setattr(pipeline, "run_item", second_item_interrupted)
    (tmp_path / "suite.toml").write_text(SUITE)
    result = cli_runner.invoke(main, ["regress", "--suite", str(tmp_path / "suite.toml"), "--report",
                                      str(tmp_path / "rep"), "--update-baseline", "--baseline",
                                      str(tmp_path / "base.json")])
    _interrupted(result)
    assert "INTERRUPTED: 1 of 2 items finished" in result.output
    assert not (tmp_path / "base.json").exists()  # a baseline is recorded only from a whole run
    report = json.loads((tmp_path / "rep" / "results.json").read_text())
    assert report["interrupted"] == "1 of 2 items finished" and report["passed"] is False
    assert report["entries"] and {e["key"].split("/")[1] for e in report["entries"]} == {"allgather"}
    assert all(e["passed"] for e in report["entries"]) and not report["shapes"]
    assert "INTERRUPTED (1 of 2 items finished" in (tmp_path / "rep" / "report.md").read_text()
    for plot in (tmp_path / "rep" / "plots").iterdir():  # the report links only plots that exist
        assert plot.stat().st_size > 0


def test_an_interrupted_regress_does_not_count_unfinished_cases_as_lost(tmp_path) -> None:
    from collsynth.catalog import load_plan
    from collsynth.regress import Baseline, BaselineEntry, evaluate

    (tmp_path / "suite.toml").write_text(SUITE)
    plan = load_plan(tmp_path / "suite.toml")
    baseline = Baseline("float32", {"ring:4/reducescatter/ring/Simple": BaselineEntry(frozenset({plan.name}),
                                                                                      {1024: 1.0})})
    complete = evaluate(plan, [], [], baseline)
    partial = evaluate(plan, [], [], baseline, interrupted="0 of 2 items finished")
    assert [f.key for f in complete.regressions] == ["ring:4/reducescatter/ring/Simple"]
    assert partial.regressions == [] and not partial.passed
