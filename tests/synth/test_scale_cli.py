"""`synth greedy` and `synth auto`: output, files, and one-line errors with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from collsynth.cli import main
from collsynth.schedule import Algorithm, verify


def test_greedy_writes_a_verified_algorithm(tmp_path: Path) -> None:
    out = tmp_path / "algo.json"
    result = CliRunner().invoke(main, ["synth", "greedy", "torus:3x3", "allgather", "--size", "1M", "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert "cut bound" in result.output
    verify(Algorithm.load(out))


def test_auto_report(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["synth", "auto", "ring:6", "allreduce", "--size", "4M", "--time-limit", "20",
                                       "--report", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    bound = json.loads((tmp_path / "rep" / "bound.json").read_text())
    assert 0 < bound["time_us"] <= bound["model_time_us"]
    verify(Algorithm.load(tmp_path / "rep" / "algorithm.json"))


def test_bad_input_is_one_line_exit_2() -> None:
    for args in (["synth", "greedy", "ring:4", "allgather", "--size", "0"],
                 ["synth", "auto", "ring:4", "allgather", "--time-limit", "0"],
                 ["synth", "greedy", "ring:4", "allgather", "--link-gbps", "-1"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.strip().startswith("error:") and "\n" not in result.output.strip()


def test_trees_command_certifies_on_a_torus() -> None:
    result = CliRunner().invoke(main, ["synth", "trees", "torus:4x4", "allgather", "--size", "16M"])
    assert result.exit_code == 0, result.output
    assert "certified optimal" in result.output


def test_trees_refuses_alltoall() -> None:
    result = CliRunner().invoke(main, ["synth", "trees", "torus:3x3", "alltoall"])
    assert result.exit_code == 2 and "supported" in result.output


def test_hier_writes_the_best_and_every_candidate(tmp_path: Path) -> None:
    out, every = tmp_path / "algo.json", tmp_path / "all"
    result = CliRunner().invoke(main, ["synth", "hier", "2xndv4", "alltoall", "--size", "1M", "--sources",
                                       "direct,ring", "-o", str(out), "--all", str(every)])
    assert result.exit_code == 0, result.output
    assert result.output.count("candidate ") == len(list(every.iterdir())) >= 2
    best = Algorithm.load(out)
    verify(best)
    assert best.provenance["synthesizer"] == "hierarchical"


def test_hier_refusals_are_one_line() -> None:
    for args, needle in ((["synth", "hier", "ring:8", "allreduce"], "one node"),
                         (["synth", "hier", "2xndv4", "broadcast"], "supported"),
                         (["synth", "hier", "2xndv4", "allreduce", "--sources", "magic"], "unknown phase source")):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        assert needle in result.output and "\n" not in result.output.strip()


def test_auto_prints_points_as_found(tmp_path: Path) -> None:
    out = tmp_path / "algo.json"
    result = CliRunner().invoke(main, ["synth", "auto", "2xndv4", "allreduce", "--size", "1M", "--time-limit", "30",
                                       "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("found: hierarchical")
    verify(Algorithm.load(out))
