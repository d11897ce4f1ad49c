"""Unwritable outputs of the long commands are refused when the options are read, before any solving: one
`error:` line naming the option, exit 2, nothing written (issue 16). And `least-steps` with a round limit
that no number of steps can meet is refuted by a bound at once (exit 2), not step by step."""

from __future__ import annotations

import os

import pytest

from collsynth.cli import main


def _bad_targets(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep me")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return {"device": ("/dev/full", "/dev/full"), "under a file": (str(afile / "out.json"), str(afile / "rep")),
            "fifo": (str(fifo), str(fifo)), "proc": ("/proc/collsynth-x.json", "/proc/collsynth-rep"),
            "directory as file": (str(tmp_path), str(afile))}


COMMANDS = [
    (["synth", "instance", "ring:4", "allgather", "-c1", "-s3"], "-o"),
    (["synth", "least-steps", "ring:4", "allgather"], "-o"),
    (["synth", "pareto", "ring:4", "allgather"], "--report"),
    (["synth", "milp", "ndv2", "allgather", "--sketch", "missing-sketch.json"], "-o"),
    (["synth", "milp", "ndv2", "allgather", "--sketch", "missing-sketch.json"], "--report"),
    (["synth", "auto", "ring:4", "allgather"], "-o"),
    (["synth", "greedy", "ring:4", "allgather"], "--report"),
    (["regress", "--quick"], "--report"),
    (["tune", "ring:4", "allgather"], "--report"),
]


@pytest.mark.parametrize(("args", "option"), COMMANDS, ids=lambda v: " ".join(v) if isinstance(v, list) else v)
@pytest.mark.parametrize("kind", ["device", "under a file", "fifo", "proc", "directory as file"])
def test_an_unwritable_output_is_refused_before_any_work(cli_runner, tmp_path, monkeypatch, args, option, kind):
    import collsynth.synth.instance as instance

    def no_solving(*_args, **_kwargs):
        raise AssertionError("solved before checking the output")

    monkeypatch.setattr(instance, "synthesize_instance", no_solving)
    before = sorted(p.name for p in tmp_path.iterdir())
    file_target, dir_target = _bad_targets(tmp_path)[kind]
    target = dir_target if option == "--report" else file_target
    result = cli_runner.invoke(main, [*args, option, target])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for") and option in lines[0], lines
    assert (tmp_path / "afile").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*before, "afile", "fifo"})


# The short commands: each input is missing, so an error about the output option proves that the output was
# checked first (when the options were read), before the command read anything or did any work.
SHORT_COMMANDS = [
    (["compile", "missing.py"], "-o", False),
    (["lower", "missing.json"], "-o", False),
    (["lower", "missing.json"], "--xml", False),
    (["export", "chakra", "missing.xml"], "-o", True),
    (["export", "mscclpp", "missing.xml"], "-o", False),
    (["topo", "draw", "missing-topology.json"], "-o", False),
    (["catalog", "export", "--db", "missing.sqlite"], "--msccl", True),
    (["catalog", "export", "--db", "missing.sqlite", "-t", "h100_nvswitch"], "--mscclpp", True),
    (["algorithms", "show", "no_such_program"], "-o", False),
    (["sim", "missing.xml"], "--plot", False),
]


@pytest.mark.parametrize(("args", "option", "directory"), SHORT_COMMANDS,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
@pytest.mark.parametrize("kind", ["device", "under a file", "fifo", "proc", "directory as file"])
def test_a_short_command_refuses_an_unwritable_output_first(cli_runner, tmp_path, args, option, directory, kind):
    before = sorted(p.name for p in tmp_path.iterdir())
    file_target, dir_target = _bad_targets(tmp_path)[kind]
    result = cli_runner.invoke(main, [*args, option, dir_target if directory else file_target])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and lines[0].startswith("error: Invalid value for") and option in lines[0], lines
    assert (tmp_path / "afile").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({*before, "afile", "fifo"})


@pytest.mark.parametrize(("args", "option", "directory"), SHORT_COMMANDS[:4],
                         ids=lambda v: " ".join(v) if isinstance(v, list) else str(v))
def test_a_writable_output_of_a_short_command_passes_the_check(cli_runner, tmp_path, args, option, directory):
    result = cli_runner.invoke(main, [*args, option, str(tmp_path / "new" / "out")])
    assert result.exit_code == 2 and "missing" in result.output and "Invalid value" not in result.output
    assert not (tmp_path / "new").exists()


def test_a_writable_new_report_directory_is_not_created_by_the_check(cli_runner, tmp_path):
    # a good path passes the check; the check itself creates nothing (the missing sketch then stops the run)
    report = tmp_path / "new" / "report"
    result = cli_runner.invoke(main, ["synth", "milp", "ndv2", "allgather", "--sketch", str(tmp_path / "none.json"),
                                      "--report", str(report)])
    assert result.exit_code == 2 and "none.json" in result.output
    assert not (tmp_path / "new").exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("args", "why"), [
    (["ring:4", "allgather", "-r", "1"], "needs at least 2 steps"),
    (["ring:16", "allgather", "-r", "2"], "needs at least 8 steps"),
    (["dgx1", "allgather", "-c", "4", "-r", "4"], "needs at least 5 rounds"),
])
def test_least_steps_with_an_impossible_round_limit_is_cut_short(cli_runner, args, why):
    result = cli_runner.invoke(main, ["synth", "least-steps", *args, "--max-steps", "200"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and why in lines[0] and "raise --rounds" in lines[0]


@pytest.mark.parametrize("args", [
    ["synth", "instance", "ring:4", "allgather", "-c1", "-s2", "--root", "-1"],
    ["synth", "instance", "ring:4", "allgather", "-c1", "-s2", "--root", "4"],
    ["synth", "greedy", "ring:4", "allgather", "--root", "-1"],
])
def test_a_root_that_is_not_a_rank_is_refused(cli_runner, args):
    # found by the hand-written campaign (tests/fuzz/hand_campaign.py): ignored for unrooted collectives before
    result = cli_runner.invoke(main, args)
    assert result.exit_code == 2 and "--root" in result.output and len(result.output.strip().splitlines()) == 1
