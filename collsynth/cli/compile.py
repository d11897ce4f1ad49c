"""`collsynth compile PROGRAM.py [program args] -o out.xml`: compile any DSL file to MSCCL-IR XML.

The file runs as a script with sys.argv = [PROGRAM.py, *args]; the programs it builds (a `with
MSCCLProgram(...)` block, `ProgramBuilder.build()`) and the IRs its `XML()` calls produce are collected.
The last one is compiled (or `--name` picks one), checked in the CPU interpreter, and written.
Options meant for the program itself that clash with ours go after `--`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import runpy
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from collsynth.cli.params import OutputPath
from collsynth.core.errors import CollsynthError
from collsynth.core.targets import DEFAULT_TARGET, XML_TARGETS, get_target

if TYPE_CHECKING:  # the compiler and the DSL (numpy, networkx) load when the command runs, not for --help
    from collsynth.collectives import Collective
    from collsynth.ir import Algo
    from collsynth.language import Program

# Elements per chunk when the compiled program is checked in the interpreter.
VERIFY_CHUNK_ELEMS = 4


def run_dsl_file(path: str, args: tuple[str, ...] | list[str]) -> list[Any]:
    """Run a DSL file as a script; return what it built, in order (Programs and XML() IRs)."""
    from collsynth.compiler import CompileError
    from collsynth.language.builder import CAPTURE

    target = Path(path)
    captured: list[Any] = []
    token = CAPTURE.set(captured)
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(target), *args]
    sys.path.insert(0, str(target.resolve().parent))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            runpy.run_path(str(target), run_name="__main__")
    except CollsynthError:
        raise
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise CompileError(f"{target.name} exited with status {exc.code} before building a program "
                               "(see its own message above; check the program arguments)") from None
    except Exception as exc:  # the user's program failed: one line naming its line, no traceback
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).resolve() == target.resolve()]
        at = f"{target.name}:{frames[-1].lineno}: " if frames else f"{target.name}: "
        hint = ""
        if isinstance(exc, AttributeError) and str(exc).startswith("'NoneType' object"):
            hint = " (chunk() returns None for a slot nobody wrote yet, as in MSCCLang; write data there first)"
        raise CompileError(f"{at}{type(exc).__name__}: {exc}{hint}") from None
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
        CAPTURE.reset(token)
    return captured


def pick(captured: list[Any], path: str, name: str | None) -> Algo | Program:
    """The IR (from XML()) or Program to write: the last one, or the last one named `name`."""
    from collsynth.compiler import CompileError
    from collsynth.ir import Algo
    from collsynth.language import Program

    irs = [x for x in captured if isinstance(x, Algo)]
    programs = [x for x in captured if isinstance(x, Program)]
    if not irs and not programs:
        raise CompileError(f"{Path(path).name} built no program; build one with `with MSCCLProgram(...):` or "
                           "ProgramBuilder(...).build() (or call XML() inside the program)")
    candidates: list[Algo | Program] = list(irs) if irs else list(programs)
    if name is not None:
        named = [x for x in candidates if x.name == name]
        if not named:
            known = ", ".join(sorted({x.name for x in candidates}))
            raise CompileError(f"{Path(path).name} built no program named {name!r}; it built: {known}")
        return named[-1]
    names = list(dict.fromkeys(x.name for x in candidates))
    if len(names) > 1:
        click.echo(f"note: {Path(path).name} built {len(names)} programs ({', '.join(names)}); writing the last one "
                   "(choose with --name)", err=True)
    return candidates[-1]


@click.command("compile", context_settings={"ignore_unknown_options": True})
@click.argument("program", type=click.Path(dir_okay=False))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
              help="write the MSCCL-IR XML here (default: print it)")
@click.option("--name", default=None, help="which program to write when the file builds several")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="run the compiled IR in the CPU interpreter and refuse to write it if it fails")
@click.option("--show-ir", is_flag=True, help="print the IR in readable form instead of XML")
@click.option("--target", type=click.Choice(XML_TARGETS), default=DEFAULT_TARGET, show_default=True,
              help="the runtime that loads the XML: its limits (work is split to fit) and spellings")
def compile_command(program: str, args: tuple[str, ...], output: str | None, name: str | None, verify: bool,
                    show_ir: bool, target: str) -> None:
    """Compile a DSL program (MSCCLang-compatible) to MSCCL-IR XML."""
    from collsynth.collectives import Collective
    from collsynth.compiler import CompileError, compile_program, instance_collective
    from collsynth.compiler.split import target_violation
    from collsynth.ir import Algo
    from collsynth.language import Program

    if not os.path.isfile(program):
        raise CompileError(f"{program}: no such file; give the path of a DSL program (.py)")
    captured = run_dsl_file(program, args)
    chosen = pick(captured, program, name)
    if isinstance(chosen, Algo) and target_violation(chosen, target) is not None:
        # XML() compiled it without a target: compile the traced program again, split to fit the target
        traced = [x for x in captured if isinstance(x, Program) and x.name == chosen.name]
        if traced:
            chosen = traced[-1]
    coll: Collective | None
    if isinstance(chosen, Program):
        ir, coll = compile_program(chosen, target=target), instance_collective(chosen.collective, chosen.instances)
    else:  # an IR printed by XML(): the compiler recorded its collective
        ir = chosen
        recorded = dict(ir.meta).get("collective")
        coll = Collective.from_dict(json.loads(recorded)) if recorded else None
    if verify:
        from collsynth.runtime import execute

        chunks = max((gpu.i_chunks for gpu in ir.gpus), default=1) if coll is None else coll.input_chunks
        result = execute(ir, backend="cpu", nbytes=max(chunks, 1) * VERIFY_CHUNK_ELEMS * 4, dtype="float32",
                         collective=coll, fifo_capacity=get_target(target).fifo_slots)
        if not result.passed:
            click.echo(str(result), err=True)
            click.echo("error: the compiled program fails in the interpreter; nothing written", err=True)
            sys.exit(1)
    if show_ir:
        click.echo(str(ir))
    elif output is None:
        from collsynth.emit.msccl_xml import ir_to_xml

        click.echo(ir_to_xml(ir, target), nl=False)
    if output is not None:
        from collsynth.emit.msccl_xml import write_xml

        write_xml(ir, output, target)
        tbs = sum(len(gpu.tbs) for gpu in ir.gpus)
        click.echo(f"compiled {ir.name!r}: {ir.collective} on {ir.ngpus} gpus, {ir.nchannels} channel(s), {tbs} "
                   f"threadblocks, {ir.num_steps} steps -> {output}", err=True)


COMMANDS = (compile_command,)
