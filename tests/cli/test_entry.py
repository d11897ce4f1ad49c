"""The `collsynth` entry point: fast lazy --help, one-line errors, Ctrl-C/SIGTERM without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from collsynth.cli import _MODULES, main

HEAVY = ("z3", "pulp", "highspy", "matplotlib", "numpy", "networkx", "pydantic", "lxml", "scipy")


def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120,
                          **kwargs)


def test_help_imports_no_heavy_module():
    done = _python(f"""
        import sys
        from collsynth.cli import main
        try:
            main(["--help"])
        except SystemExit as exc:
            assert exc.code == 0, exc.code
        print("HEAVY=" + ",".join(m for m in {HEAVY!r} if m in sys.modules))
        """)
    assert done.returncode == 0, done.stderr
    assert "Commands:" in done.stdout and "regress" in done.stdout
    assert done.stdout.splitlines()[-1] == "HEAVY="


def test_listed_help_is_each_commands_own():
    for commands in _MODULES.values():
        for name, help_text in commands:
            command = main.get_command(None, name)  # type: ignore[arg-type]
            assert command is not None, name
            assert command.get_short_help_str(limit=60) == help_text, name


def test_synth_group_gathers_every_modules_subcommands():
    synth = main.get_command(None, "synth")  # type: ignore[arg-type]
    assert {"instance", "least-steps", "pareto", "milp"} <= set(synth.commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("args", [
    ["sim", "missing.xml", "-t", "ring:4"],
    ["topo", "show", "nosuch:4"],
    ["run", "x.xml", "--nosuch"],
    ["nosuchcommand"],
])
def test_errors_are_one_line_exit_2(cli_runner, args, tmp_path):
    result = cli_runner.invoke(main, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr


def test_sigterm_is_handled_like_ctrl_c():
    code = """
        import os, signal, time
        from collsynth.cli import main
        import click

        @click.command("sleepy")
        def sleepy():
            try:
                print("ready", flush=True)
                time.sleep(60)
            except KeyboardInterrupt:
                print("kept finished work", flush=True)
                raise

        main.add_command(sleepy)
        main(["sleepy"])
        """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "ready"
    os.kill(proc.pid, signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert "kept finished work" in out
    assert err.strip() == "interrupted" and "Traceback" not in err


def test_ctrl_c_during_start_up_prints_no_traceback():
    # a KeyboardInterrupt while a command module is being imported (the lazy import happens inside main)
    done = _python("""
        import collsynth.cli
        def interrupting(name):
            raise KeyboardInterrupt  # as if Ctrl-C arrived while the command's module is imported
        collsynth.cli._module = interrupting
        from collsynth.cli import main
        main(["topo", "list"])
        """)
    assert done.returncode == 130, done.stderr
    assert done.stderr.strip() == "interrupted"


def test_sigterm_during_a_pareto_sweep_keeps_the_finished_points(tmp_path):
    out = tmp_path / "rep"
    code = f"""
        import sys, time
        import collsynth.synth.report as report
        from collsynth.cli import main

        real = report.write_progress
        calls = []
        def slow_after_first_point(result, directory):  # the next solve takes long: SIGTERM arrives during it
            written = real(result, directory)
            calls.append(1)
            if len(calls) == 1:  # later calls (the save after the interrupt) run at full speed
                print("point", flush=True)
                time.sleep(60)
            return written
        report.write_progress = slow_after_first_point
        main(["synth", "pareto", "ring:3", "allgather", "--max-chunks", "2", "--report", {str(out)!r}])
        """
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    while (line := proc.stdout.readline()) and line.strip() != "point":
        pass
    os.kill(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    doc = json.loads((out / "frontier.json").read_text())
    assert doc["stopped"] == "interrupted" and doc["points"]


def test_no_arguments_show_the_help(cli_runner):
    for args in ([], ["synth"]):
        result = cli_runner.invoke(main, args)
        assert "Usage:" in result.output and "Commands:" in result.output
        assert "error:" not in result.output
