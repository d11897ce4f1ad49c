"""`collsynth algorithms list|show`."""

from __future__ import annotations

from collsynth.algorithms import LIBRARY
from collsynth.cli import main
from collsynth.emit.msccl_xml import read_xml


def test_list_shows_every_program(cli_runner) -> None:
    result = cli_runner.invoke(main, ["algorithms", "list"], terminal_width=200)
    assert result.exit_code == 0, result.output
    for name, entry in LIBRARY.items():
        assert name in result.output
        assert entry.ranks in result.output


def test_list_filters_by_collective(cli_runner) -> None:
    result = cli_runner.invoke(main, ["algorithms", "list", "--collective", "all-to-all"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "two_step_alltoall" in result.output and "ring_allreduce" not in result.output


def test_show_prints_xml(cli_runner) -> None:
    result = cli_runner.invoke(main, ["algorithms", "show", "ring_allreduce", "--ranks", "8", "--channels", "2"])
    assert result.exit_code == 0, result.output
    ir = read_xml(result.stdout)
    assert ir.ngpus == 8 and ir.collective == "allreduce" and ir.nchannels == 2


def test_show_writes_file_and_checks(cli_runner, tmp_path) -> None:
    out = tmp_path / "hier.xml"
    result = cli_runner.invoke(main, ["algorithms", "show", "hierarchical-allreduce", "--ranks", "16", "--nodes", "4",
                                      "--instances", "2", "-o", str(out), "--check", "64KB"])
    assert result.exit_code == 0, result.output
    assert "wrote" in result.stderr and "PASS" in result.stderr
    ir = read_xml(out)
    assert ir.ngpus == 16 and ir.nchannels == 4


def test_show_custom_collective_checks(cli_runner) -> None:
    result = cli_runner.invoke(main, ["algorithms", "show", "alltonext", "--ranks", "8", "--nodes", "2", "--check",
                                      "4KB"])
    assert result.exit_code == 0, result.output
    assert "PASS" in result.stderr


def test_show_on_a_named_topology(cli_runner) -> None:
    result = cli_runner.invoke(main, ["algorithms", "show", "ring_allgather", "--topology", "dgx1"])
    assert result.exit_code == 0, result.output
    assert read_xml(result.stdout).ngpus == 8


def _one_line_error(result, fragment: str) -> None:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and fragment in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_show_errors_are_one_line(cli_runner) -> None:
    _one_line_error(cli_runner.invoke(main, ["algorithms", "show", "nope", "--ranks", "8"]),
                    "unknown library program 'nope'")
    _one_line_error(cli_runner.invoke(main, ["algorithms", "show", "recursive_doubling_allgather", "--ranks", "12"]),
                    "power-of-two")
    _one_line_error(cli_runner.invoke(main, ["algorithms", "show", "ring_allreduce", "--ranks", "8", "--segments",
                                             "2"]), "takes no --segments")
    _one_line_error(cli_runner.invoke(main, ["algorithms", "show", "two_step_alltoall", "--ranks", "8", "--inplace"]),
                    "no in-place variant")
    _one_line_error(cli_runner.invoke(main, ["algorithms", "show", "ring_allreduce"]), "give --ranks")
    _one_line_error(cli_runner.invoke(main, ["algorithms", "show", "ring_allreduce", "--ranks", "4", "--channels",
                                             "2", "--instances", "17"]), "32")


def test_compile_command_runs_a_dsl_file_that_uses_the_library(cli_runner, tmp_path) -> None:
    program = tmp_path / "ring_prog.py"
    program.write_text("import sys\n"
                       "from collsynth.algorithms import ring_allreduce\n"
                       "from collsynth.topologies import ring\n"
                       "ring_allreduce(ring(int(sys.argv[1])), channels=2)\n")
    out = tmp_path / "ring.xml"
    result = cli_runner.invoke(main, ["compile", str(program), "6", "-o", str(out)])
    assert result.exit_code == 0, result.output
    ir = read_xml(out)
    assert ir.ngpus == 6 and ir.name == "ring_allreduce"
