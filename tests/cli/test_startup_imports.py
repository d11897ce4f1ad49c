"""What `collsynth --help` imports, run as users run it: the installed console script (whatever it and click's help
formatting pull in included), every module read from `-X importtime`. Issue 16 asks for a --help under 0.15 s;
this checks the cause (no avoidable import), not the time, which depends on the machine and its load."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Imported by no top-level help: solvers, numerics, plotting, schema validation, XML, and the worker-pool machinery
# (multiprocessing, concurrent.futures: ~40 ms, reached once through collsynth.core.signals).
HEAVY = ("z3", "pulp", "highspy", "matplotlib", "numpy", "networkx", "pydantic", "lxml", "scipy", "jsonschema",
         "multiprocessing", "concurrent", "asyncio", "subprocess", "xml", "json", "tomllib", "logging", "email")
# The only collsynth modules the top-level help may import (the command modules are listed from a table).
COLLSYNTH_ALLOWED = {"collsynth", "collsynth.cli", "collsynth.core", "collsynth.core.signals",
                     "collsynth.core.signals_held"}


def _console_script() -> Path:
    beside = Path(sys.executable).parent / "collsynth"
    found = beside if beside.exists() else shutil.which("collsynth")
    if found is None:
        pytest.skip("no installed `collsynth` console script")
    return Path(found)


def imported_by(*args: str) -> set[str]:
    """Every module the console script imports for `collsynth ARGS`, run by this interpreter."""
    done = subprocess.run([sys.executable, "-X", "importtime", str(_console_script()), *args], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Usage:" in done.stdout
    rows = [line.split("|")[-1] for line in done.stderr.splitlines() if line.startswith("import time:")]
    return {row.strip() for row in rows[1:]}  # rows[0] is the header


def test_top_level_help_imports_nothing_heavy() -> None:
    modules = imported_by("--help")
    assert "click" in modules and "collsynth.cli" in modules  # the parse found the real imports
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY)
    assert heavy == []
    assert sorted(m for m in modules if m.split(".")[0] == "collsynth" and m not in COLLSYNTH_ALLOWED) == []


def test_the_pool_names_still_come_from_core_signals() -> None:
    # collsynth.core.signals loads its pool half (signals_pool) only when one of its names is asked for
    from collsynth.core import signals, signals_pool

    assert signals.SafeStartPool is signals_pool.SafeStartPool and signals.stop_pool is signals_pool.stop_pool
    with pytest.raises(AttributeError):
        signals.no_such_name  # noqa: B018


# Every command's and group's --help, printed in one process: what it imported by then.
_EVERY_HELP = """
import sys
import click
from collsynth.cli import main

ctx = click.Context(main)
paths = []

def walk(command, path):
    paths.append(path)
    if isinstance(command, click.Group):
        for name in command.list_commands(ctx):
            walk(command.get_command(ctx, name), [*path, name])

walk(main, [])
for path in paths:
    try:
        main.main([*path, "--help"], prog_name="collsynth", standalone_mode=False)
    except SystemExit:
        pass
print(repr((paths, sorted(sys.modules))))
"""

# Imported by no --help page, of any command: solvers, numerics, graphs, plotting, XML, tables.
SUBCOMMAND_HEAVY = ("z3", "pulp", "highspy", "matplotlib", "numpy", "networkx", "scipy", "lxml", "rich", "dask")


def test_no_help_page_imports_a_solver_or_numerics() -> None:
    import ast

    done = subprocess.run([sys.executable, "-c", _EVERY_HELP], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    paths, modules = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert done.stdout.count("Usage:") == len(paths) > 30  # every help page printed (the walk found them all)
    assert {"synth", "milp"} <= {p[-1] for p in paths if p} and ["catalog", "build"] in paths
    assert sorted(m for m in modules if m.split(".")[0] in SUBCOMMAND_HEAVY) == []


@pytest.mark.parametrize("group", ["synth", "catalog"])
def test_a_group_help_from_the_console_script_imports_nothing_heavy(group: str) -> None:
    modules = imported_by(group, "--help")
    # the group's module ran (-X importtime does not list what importlib.import_module loads, only its imports)
    assert "collsynth.cli.params" in modules
    assert sorted(m for m in modules if m.split(".")[0] in SUBCOMMAND_HEAVY) == []


def test_each_command_module_is_in_the_registry() -> None:
    # only the registry's modules load (`synth` gathers _SYNTH_MODULES): a module missing there would be dropped
    import importlib
    import pkgutil

    import collsynth.cli as cli

    for info in pkgutil.iter_modules(cli.__path__):
        module = importlib.import_module(f"collsynth.cli.{info.name}")
        assert hasattr(module, "SYNTH_COMMANDS") == (info.name in cli._SYNTH_MODULES), info.name
        assert hasattr(module, "COMMANDS") == (info.name in cli._MODULES), info.name


def test_the_run_options_name_what_the_runtime_has() -> None:
    from collsynth import runtime
    from collsynth.cli import run
    from collsynth.runtime import numerics

    assert run.BACKEND_NAMES == runtime.BACKENDS
    assert tuple(numerics.FORMATS) == run.FORMAT_NAMES
    assert run.OP_NAMES == numerics.REDUCTION_OPS
