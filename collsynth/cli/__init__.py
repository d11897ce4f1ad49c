"""The `collsynth` command. Each command group lives in its own module of this package."""

from __future__ import annotations

import importlib
import sys

import click

from collsynth.errors import CollsynthError


class _Main(click.Group):
    """Turns user-facing errors into one line on stderr and exit code 2, and Ctrl-C into exit 130."""

    def invoke(self, ctx: click.Context):  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except CollsynthError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="collsynth")
def main() -> None:
    """Synthesize, compile, verify and run collective-communication algorithms."""


# Command modules, each exposing click commands/groups in `COMMANDS`.
# `COMMANDS` are added to the top level, `SYNTH_COMMANDS` to the `synth` group.
_MODULES = ("topo", "synth", "milp", "compile", "algorithms", "run", "lower", "sim", "catalog", "regress", "export")

for _name in _MODULES:
    try:
        _module = importlib.import_module(f"collsynth.cli.{_name}")
    except ModuleNotFoundError as _exc:  # TODO(integration): list modules explicitly once all exist
        if _exc.name != f"collsynth.cli.{_name}":
            raise
        continue
    for _command in getattr(_module, "COMMANDS", ()):
        main.add_command(_command)

for _name in _MODULES:
    _module = sys.modules.get(f"collsynth.cli.{_name}")
    for _command in getattr(_module, "SYNTH_COMMANDS", ()):
        main.commands["synth"].add_command(_command)  # type: ignore[attr-defined]
