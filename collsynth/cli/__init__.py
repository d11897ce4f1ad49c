"""The `collsynth` command. Each command group lives in its own module of this package."""

from __future__ import annotations

import sys

import click

from collsynth.cli import algorithms, catalog, compile, export, lower, milp, regress, run, sim, synth, synth_scale, topo
from collsynth.core.errors import CollsynthError


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


# Each command module exposes `COMMANDS` (added to the top level) and/or `SYNTH_COMMANDS` (added to the
# `synth` group), so that every stage's commands live beside each other and this list is the only registry.
_MODULES = (topo, synth, milp, lower, compile, algorithms, run, sim, export, catalog, regress, synth_scale)

for _module in _MODULES:
    for _command in getattr(_module, "COMMANDS", ()):
        main.add_command(_command)
for _module in _MODULES:
    for _command in getattr(_module, "SYNTH_COMMANDS", ()):
        main.commands["synth"].add_command(_command)  # type: ignore[attr-defined]
