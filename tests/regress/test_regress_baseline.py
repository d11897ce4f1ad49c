"""Regression logic: baselines, findings, matchups, shape checks, the CLI on a small library suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from collsynth.catalog import CompileVariant
from collsynth.cli import main
from collsynth.regress import (
    Baseline,
    BaselineEntry,
    BaselineError,
    CaseEntry,
    compare_with_baseline,
    load_baseline,
    matchups,
    save_baseline,
    shape_checks,
    updated_baseline,
)

SUITE = """
name = "tiny"
sizes = "1KB:16MB"
size_factor = 16
[[targets]]
topology = "fully_connected:4"
collectives = ["allreduce"]
library = ["ring_allreduce", "allpairs_allreduce_one_phase"]
"""


Shape = tuple[int | None, int | None, int | None]


def entry(name: str, times: dict[int, float], *, source: str = "library", passed: bool = True,
          shape: Shape = (None, None, None), case: str = "dgx1/allgather") -> CaseEntry:
    topology, collective = case.split("/")
    variant = CompileVariant()
    return CaseEntry(key=f"{case}/{name}/Simple", topology=topology, collective=collective, name=name, source=source,
                     variant=variant, chunks=shape[0], steps=shape[1], rounds=shape[2], passed=passed,
                     message="ok" if passed else "interpret: mismatch", times_us=times,
                     busbw={s: 1.0 for s in times})


def test_baseline_round_trip_and_suite_update(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    assert load_baseline(path).entries == {}
    first = updated_baseline(load_baseline(path), "quick", "float", {"a": {1024: 1.5}, "b": {1024: 2.0}})
    save_baseline(first, path)
    loaded = load_baseline(path)
    assert loaded.entries["a"] == BaselineEntry(frozenset({"quick"}), {1024: 1.5})
    # the full suite shares "a", adds "c"; quick's "b" stays
    both = updated_baseline(loaded, "full", "float", {"a": {1024: 1.5, 4096: 3.0}, "c": {1024: 9.0}})
    assert both.entries["a"].suites == frozenset({"quick", "full"}) and both.entries["a"].times_us[4096] == 3.0
    assert set(both.for_suite("quick")) == {"a", "b"} and set(both.for_suite("full")) == {"a", "c"}
    # quick no longer produces "b": it leaves the baseline
    again = updated_baseline(both, "quick", "float", {"a": {1024: 1.5}})
    assert "b" not in again.entries and again.entries["a"].suites == frozenset({"quick", "full"})


def test_malformed_baseline(tmp_path: Path) -> None:
    path = tmp_path / "baseline.json"
    path.write_text("{not json")
    with pytest.raises(BaselineError, match="--update-baseline"):
        load_baseline(path)
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(BaselineError, match="not a regression baseline"):
        load_baseline(path)


def test_findings_against_the_baseline() -> None:
    baseline = Baseline("float", {
        "dgx1/allgather/steady/Simple": BaselineEntry(frozenset({"quick"}), {1024: 10.0, 2048: 20.0}),
        "dgx1/allgather/slower/Simple": BaselineEntry(frozenset({"quick"}), {1024: 10.0, 2048: 20.0}),
        "dgx1/allgather/faster/Simple": BaselineEntry(frozenset({"quick"}), {1024: 10.0}),
        "dgx1/allgather/lost/Simple": BaselineEntry(frozenset({"quick"}), {1024: 10.0}),
        "dgx1/allgather/other-suite/Simple": BaselineEntry(frozenset({"full"}), {1024: 10.0}),
    })
    entries = [entry("steady", {1024: 10.2, 2048: 20.5}), entry("slower", {1024: 10.0, 2048: 23.0}),
               entry("faster", {1024: 5.0}), entry("wrong", {1024: 1.0}, passed=False), entry("fresh", {1024: 1.0})]
    findings = compare_with_baseline(entries, [("dgx1 allgather frontier", "synthesis: timeout")], baseline,
                                     "quick", 0.05)
    by_key = {(f.severity, f.key.split("/")[2] if "/" in f.key else f.key) for f in findings}
    assert by_key == {("regression", "dgx1 allgather frontier"), ("regression", "slower"), ("improvement", "faster"),
                      ("regression", "wrong"), ("new", "fresh"), ("regression", "lost")}
    slower = next(f for f in findings if "slower" in f.key)
    assert "+15.0 %" in slower.message and "2KB" in slower.message


def test_matchups_pick_best_of_each_side() -> None:
    entries = [entry("ring", {1: 10.0, 2: 12.0}), entry("tree", {1: 8.0, 2: 30.0}),
               entry("smt-a", {1: 4.0, 2: 40.0}, source="pareto"), entry("smt-b", {1: 9.0, 2: 11.0}, source="pareto"),
               entry("broken", {1: 0.1}, source="pareto", passed=False)]
    rows = matchups(entries)["dgx1/allgather"]
    assert [(r.synthesized, r.handwritten, r.winner) for r in rows] == [
        ("smt-a", "tree", "synthesized"), ("smt-b", "ring", "synthesized")]
    assert rows[0].speedup == pytest.approx(2.0)


def test_matchups_use_tuned_times_where_tuning_won() -> None:
    """A tuned time replaces the variant's where it is faster (out-of-place entries only); slower tuned times
    are ignored."""
    from dataclasses import replace

    ring = replace(entry("ring", {1: 10.0, 2: 12.0}), tuned_us={1: 9.0, 2: 13.0})
    smt = replace(entry("smt-a", {1: 11.0, 2: 20.0}, source="pareto"), tuned_us={1: 6.0, 2: 11.5})
    rows = matchups([ring, smt])["dgx1/allgather"]
    assert [(r.synthesized_us, r.handwritten_us, r.winner) for r in rows] == [
        (6.0, 9.0, "synthesized"), (11.5, 12.0, "synthesized")]
    inplace = replace(smt, variant=CompileVariant(inplace=True))
    assert [r.winner for r in matchups([ring, inplace])["dgx1/allgather"]] == ["hand-written", "hand-written"]


def test_shape_check_latency_and_bandwidth_points() -> None:
    ring = entry("ring_allgather", {1024: 10.0, 1 << 30: 1000.0})
    latency = entry("smt-c1s2r2", {1024: 5.0, 1 << 30: 2000.0}, source="pareto", shape=(1, 2, 2))
    bandwidth = entry("smt-c6s3r7", {1024: 7.0, 1 << 30: 1010.0}, source="pareto", shape=(6, 3, 7))
    checks = shape_checks([ring, latency, bandwidth], tolerance=0.05)
    assert [c.passed for c in checks] == [True, True]
    assert "smt-c1s2r2" in checks[0].claim and "smt-c6s3r7" in checks[1].claim
    slow = entry("smt-c6s3r7", {1024: 7.0, 1 << 30: 1100.0}, source="pareto", shape=(6, 3, 7))
    assert [c.passed for c in shape_checks([ring, latency, slow], tolerance=0.05)] == [True, False]
    missing = shape_checks([ring])
    assert len(missing) == 1 and not missing[0].passed


def test_cli_suite_update_baseline_then_detect_regression(tmp_path: Path, cli_runner) -> None:
    suite = tmp_path / "tiny.toml"
    suite.write_text(SUITE)
    baseline = tmp_path / "baseline.json"
    report = tmp_path / "report"
    args = ["regress", "--suite", str(suite), "--baseline", str(baseline)]
    first = cli_runner.invoke(main, args)  # a --baseline that does not exist is a typo unless it is being created
    assert first.exit_code == 2 and "no such file" in first.stderr and len(first.stderr.splitlines()) == 1
    updated = cli_runner.invoke(main, [*args, "--update-baseline"])
    assert updated.exit_code == 0 and "baseline updated" in updated.output
    stored = json.loads(baseline.read_text())
    assert set(stored["entries"]) == {"fully_connected:4/allreduce/ring_allreduce/Simple",
                                      "fully_connected:4/allreduce/allpairs_allreduce_one_phase/Simple"}
    clean = cli_runner.invoke(main, [*args, "--report", str(report)])
    assert clean.exit_code == 0 and "PASS" in clean.output
    assert (report / "report.md").is_file() and (report / "results.json").is_file()
    assert list((report / "plots").glob("*.png"))
    # Pretend the ring used to be 20 % faster: now it is a regression, exit 1.
    key = "fully_connected:4/allreduce/ring_allreduce/Simple"
    stored["entries"][key]["times_us"] = {s: t / 1.2 for s, t in stored["entries"][key]["times_us"].items()}
    baseline.write_text(json.dumps(stored))
    regressed = cli_runner.invoke(main, args)
    assert regressed.exit_code == 1
    assert "REGRESSION" in regressed.output and "ring_allreduce" in regressed.output
    # A larger tolerance accepts it.
    assert cli_runner.invoke(main, [*args, "--tolerance", "0.25"]).exit_code == 0


def test_cli_bad_input(tmp_path: Path, cli_runner) -> None:
    bad = tmp_path / "baseline.json"
    bad.write_text("[")
    for argv in (["regress", "--baseline", str(bad)], ["regress", "--suite", str(tmp_path / "absent.toml")],
                 ["regress", "--quick", "--suite", str(bad)], ["regress", "--tolerance", "2", "--suite", str(bad)]):
        result = cli_runner.invoke(main, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert len(result.output.strip().splitlines()) == 1 and result.output.startswith("error: ")
