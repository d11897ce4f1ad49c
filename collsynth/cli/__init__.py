"""The `collsynth` command. Each command group lives in its own module of this package, imported only when
its command runs (so `collsynth --help` starts in a fraction of a second: no solver, numpy or plotting import).

Every error a user can cause is one line on stderr and exit code 2 (a `CollsynthError`, a click usage
error, an OS error on a file); Ctrl-C and SIGTERM are exit 130 with no traceback, after the command's own
interrupt handling kept its finished work (inside `core.signals.keeping_finished_work`) and the interrupted
frames were dropped (`_Main.invoke`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import click

# Each command module exposes `COMMANDS` (added to the top level) or `SYNTH_COMMANDS` (added to the `synth`
# group). These tables are the only registry: module -> the top-level commands it adds, with their one-line
# help, which `collsynth --help` lists without importing the module (tests/cli/test_entry.py checks that the
# help here is the command's own); and the modules whose SYNTH_COMMANDS join `synth` (only these load for
# `collsynth synth ...`; tests/cli/test_startup_imports.py checks that no other module has any).
_MODULES: dict[str, tuple[tuple[str, str], ...]] = {
    "topo": (("topo", "Topologies: list the built-ins, show one, draw one."),),
    "synth": (("synth", "Synthesize collective algorithms: SCCL-style SMT..."),),
    "lower": (("lower", "Lower a synthesized ALGORITHM (JSON) to a DSL program..."),),
    "compile": (("compile", "Compile a DSL program (MSCCLang-compatible) to MSCCL-IR XML."),),
    "algorithms": (("algorithms", "The hand-written algorithm library (ring, all-pairs,..."),),
    "run": (("run", "Run XML_FILE (MSCCL-IR; a .json file: an MSCCL++..."),),
    "sim": (("sim", "Time MSCCL-IR XML FILES on a topology with the alpha-beta..."),),
    "export": (("export", "Convert an MSCCL-IR XML file for other tools (Chakra..."),),
    "catalog": (("catalog", "Build, query and export a catalog of verified, simulated..."),),
    "regress": (("regress", "Compare synthesized algorithms with the hand-written..."),),
    "tune": (("tune", "Tune COLL on TOPO per size: every algorithm x protocol,..."),),
    "doctor": (("doctor", "Say which file the target's runtime would load and pick,..."),),
}
_SYNTH_MODULES = ("milp", "synth_scale")


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"collsynth.cli.{name}")


def _one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def _fail(message: str, code: int) -> None:
    click.echo(f"error: {_one_line(message)}", err=True)
    sys.exit(code)


class _Main(click.Group):
    """Loads command modules on demand; turns user-facing errors into one line on stderr and exit code 2,
    and Ctrl-C (or SIGTERM) into exit 130 without a traceback."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for commands in _MODULES.values() for name, _ in commands]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            for module_name, commands in _MODULES.items():
                if any(name == cmd_name for name, _ in commands):
                    self._load(module_name)
        return self.commands.get(cmd_name)

    def _load(self, module_name: str) -> None:
        for command in getattr(_module(module_name), "COMMANDS", ()):
            self.add_command(command)
            if command.name == "synth":
                # the `synth` group gathers the SYNTH_COMMANDS of its modules
                for other in _SYNTH_MODULES:
                    for sub in _module(other).SYNTH_COMMANDS:
                        command.add_command(sub)  # type: ignore[attr-defined]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_text) for commands in _MODULES.values() for name, help_text in commands]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        from collsynth.core.errors import CollsynthError

        try:
            return super().invoke(ctx)
        except CollsynthError as exc:
            _fail(str(exc), 2)
        except OSError as exc:  # a file a command opened itself: still one line, never a traceback
            where = f"{exc.filename}: " if exc.filename else ""
            _fail(f"{where}{exc.strerror or exc}; check the path and its permissions", 2)
        except RecursionError:
            _fail("input nested too deeply to process; simplify it", 2)
        except KeyboardInterrupt as stop:
            # Every command's interrupt passes here, after the command kept its finished work: the frames it cut
            # short (a solver's z3 contexts, MILP models) are dropped now, by reference counting. Kept, they would
            # live on through the SystemExit raised next (its __context__) or cycles made while saving, and the
            # collector would free them at exit in no set order (a z3 context before its terms: minutes).
            from collsynth.core.signals import release_frames

            release_frames(stop)
            raise

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        from collsynth.core.signals import terminate_as_interrupt

        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            with terminate_as_interrupt():
                code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as exc:  # `collsynth` alone: the help, as click shows it
            exc.show()
            sys.exit(exc.exit_code)
        except click.exceptions.UsageError as exc:
            hint = f" (see: {exc.ctx.command_path} --help)" if exc.ctx is not None else ""
            _fail(exc.format_message() + hint, exc.exit_code)
        except click.ClickException as exc:
            _fail(exc.format_message(), exc.exit_code)
        except (KeyboardInterrupt, click.Abort):
            click.echo("interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="collsynth")
def main() -> None:
    """Synthesize, compile, verify and run collective-communication algorithms."""
