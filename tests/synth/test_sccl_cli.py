"""`collsynth synth instance | least-steps | pareto` end to end: JSON schema, report files, bad input, Ctrl-C."""

import json

import pytest

from collsynth.cli import main
from collsynth.schedule import Algorithm, verify
from collsynth.topologies import Link, Topology


def test_pareto_json_schema(cli_runner):
    result = cli_runner.invoke(main, ["synth", "pareto", "ring:8", "AllGather", "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    # JSON lines: each point as it is found, then the frontier document
    assert [(x["point"]["chunks"], x["point"]["steps"], x["point"]["rounds"]) for x in lines[:-1]] == \
        [(1, 4, 4), (2, 4, 7)]
    doc = lines[-1]
    assert {"topology", "collective", "lower_bounds", "frontier", "tried"} <= set(doc)
    assert doc["topology"] == "ring:8" and doc["collective"] == "allgather"
    assert doc["lower_bounds"] == {"steps": 4, "rounds_per_chunk": "7/2"}
    assert doc["frontier"] == [{"chunks": 2, "steps": 4, "rounds": 7, "status": "optimal"}]
    assert [(t["chunks"], t["steps"], t["rounds"], t["result"]) for t in doc["tried"]] == \
        [(1, 4, 4, "sat"), (2, 4, 7, "sat")]
    assert all(set(t) == {"chunks", "steps", "rounds", "result", "seconds"} for t in doc["tried"])


def test_pareto_report_files(cli_runner, tmp_path):
    out = tmp_path / "report"
    result = cli_runner.invoke(main, ["synth", "pareto", "dgx1", "all_gather", "--report", str(out)])
    assert result.exit_code == 0, result.output
    assert "6 │ 3 │ 7" in result.output.replace(" ", " ")
    assert {p.name for p in out.iterdir()} == {"frontier.json", "report.md", "frontier.png", "algorithms"}
    doc = json.loads((out / "frontier.json").read_text())
    assert [(f["chunks"], f["steps"], f["rounds"]) for f in doc["frontier"]] == [(2, 2, 3), (6, 3, 7)]
    assert len(doc["points"]) == 6
    for point in doc["points"]:
        algorithm = Algorithm.load(out / point["algorithm"])
        verify(algorithm)
        assert (algorithm.chunks, algorithm.num_steps, algorithm.rounds) == \
            (point["chunks"], point["steps"], point["rounds"])
    report = (out / "report.md").read_text()
    assert "R/C >= **7/6 (1.167)**" in report and "| 6 | 3 | 7 |" in report and "frontier.png" in report
    assert (out / "frontier.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.usefixtures("z3_contexts_freed")  # none left to the cyclic collector (release_frames)
def test_ctrl_c_keeps_finished_points(cli_runner, tmp_path, monkeypatch):
    import collsynth.synth.report as report

    real = report.write_progress
    calls = []

    def interrupt_after_two(result, directory):  # Ctrl-C arriving after the second point is written
        written = real(result, directory)
        calls.append(len(result.points))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return written

    monkeypatch.setattr(report, "write_progress", interrupt_after_two)
    out = tmp_path / "partial"
    result = cli_runner.invoke(main, ["synth", "pareto", "dgx1", "allgather", "--report", str(out)])
    assert result.exit_code == 130
    doc = json.loads((out / "frontier.json").read_text())
    assert [(p["chunks"], p["steps"], p["rounds"]) for p in doc["points"]] == [(1, 2, 2), (2, 2, 3)]
    assert doc["stopped"] == "interrupted"
    assert (out / "report.md").exists() and (out / "frontier.png").exists()


def test_instance_writes_a_verified_algorithm(cli_runner, tmp_path):
    path = tmp_path / "ag.json"
    result = cli_runner.invoke(main, ["synth", "instance", "dgx1", "allgather", "--chunks", "2", "--steps", "2",
                                      "--rounds", "3", "-o", str(path)])
    assert result.exit_code == 0, result.output
    algorithm = Algorithm.load(path)
    verify(algorithm)
    assert (algorithm.chunks, algorithm.num_steps, algorithm.rounds) == (2, 2, 3)


def test_instance_unsat_exits_1(cli_runner):
    result = cli_runner.invoke(main, ["synth", "instance", "dgx1", "allgather", "-c", "3", "-s", "2", "-r", "4"])
    assert result.exit_code == 1
    assert "unsat" in result.output


def test_instance_json_and_rooted_collective(cli_runner):
    result = cli_runner.invoke(main, ["synth", "instance", "ring:4", "Reduce", "--root", "2", "-c", "1", "-s", "2",
                                      "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["status"] == "sat" and doc["least_rounds"] is True
    algorithm = Algorithm.from_dict(doc["algorithm"])
    verify(algorithm)


def test_least_steps(cli_runner):
    result = cli_runner.invoke(main, ["synth", "least-steps", "ring:8", "reduce_scatter"])
    assert result.exit_code == 0, result.output
    assert "4 steps" in result.output


def _disconnected(tmp_path):
    path = tmp_path / "islands.json"
    topo = Topology("islands", 4, (Link(0, 1), Link(1, 0), Link(2, 3), Link(3, 2)))
    path.write_text(json.dumps(topo.to_dict()))
    return str(path)


@pytest.mark.parametrize("args", [
    ["synth", "pareto", "no-such-topology", "allgather"],
    ["synth", "pareto", "dgx1", "allgatherz"],
    ["synth", "instance", "dgx1", "allgather", "--chunks", "0", "--steps", "2"],
    ["synth", "instance", "dgx1", "allgather", "--chunks", "1", "--steps", "0"],
    ["synth", "pareto", "dgx1", "allgather", "--max-chunks", "0"],
    ["synth", "pareto", "dgx1", "allgather", "--time-limit", "-1"],
    ["synth", "pareto", "dgx1", "broadcast", "--root", "9"],
    ["synth", "least-steps", "dgx1", "allgather", "--max-steps", "1"],
])
def test_bad_input_is_one_line_exit_2(cli_runner, args):
    result = cli_runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output


def test_impossible_collective_and_malformed_json_exit_2(cli_runner, tmp_path):
    result = cli_runner.invoke(main, ["synth", "pareto", _disconnected(tmp_path), "allgather"])
    assert result.exit_code == 2 and "impossible" in result.output
    broken = tmp_path / "broken.json"
    broken.write_text("{ not json")
    result = cli_runner.invoke(main, ["synth", "pareto", str(broken), "allgather"])
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["allgather", "AllGather", "all_gather", "ALL-GATHER"])
def test_collective_names_are_forgiving(cli_runner, name):
    result = cli_runner.invoke(main, ["synth", "instance", "ring:4", name, "-c", "1", "-s", "2"])
    assert result.exit_code == 0, result.output
