"""`collsynth lower`: a synthesized algorithm (JSON) -> a DSL program file and/or MSCCL-IR XML."""

from __future__ import annotations

import math
from pathlib import Path

import click

from collsynth.cli.params import OutputPath
from collsynth.core.files import write_atomic
from collsynth.core.targets import DEFAULT_TARGET, XML_TARGETS, get_target


def checkable_size(nbytes: int, ir, itemsize: int = 4) -> int:
    """The largest size <= nbytes (at least one element per chunk) whose buffers split into whole float32
    elements per chunk, as the interpreter requires."""
    unit = itemsize * math.lcm(*(n for gpu in ir.gpus for n in (gpu.i_chunks, gpu.o_chunks) if n > 0))
    return max(unit, nbytes - nbytes % unit)


@click.command()
@click.argument("algorithm", type=click.Path(dir_okay=False))
@click.option("-o", "--output", type=OutputPath(dir_okay=False), help="Write the DSL program (Python) here.")
@click.option("--xml", "xml_path", type=OutputPath(dir_okay=False), help="Compile and write MSCCL-IR XML here.")
@click.option("--instances", default=1, show_default=True, type=click.IntRange(1, 32))
@click.option("--protocol", default="Simple", show_default=True, type=click.Choice(["Simple", "LL", "LL128"]))
@click.option("--size", default="1MB", show_default=True, help="Buffer size the interpreter checks the XML with.")
@click.option("--target", type=click.Choice(XML_TARGETS), default=DEFAULT_TARGET, show_default=True,
              help="The runtime that loads the XML: its limits (work is split to fit) and spellings.")
def lower(algorithm: str, output: str | None, xml_path: str | None, instances: int, protocol: str, size: str,
          target: str) -> None:
    """Lower a synthesized ALGORITHM (JSON) to a DSL program and/or compiled XML.

    The algorithm is verified first; the compiled IR is run through the reference interpreter before any
    XML is written. With neither -o nor --xml, the program is printed."""
    from collsynth.compiler import compile_program
    from collsynth.core.units import parse_size
    from collsynth.emit.msccl_xml import write_xml
    from collsynth.language.lower import lower_to_program, program_to_python
    from collsynth.runtime import execute
    from collsynth.schedule import Algorithm, verify

    algo = Algorithm.load(algorithm)
    verify(algo)
    program = lower_to_program(algo, instances=instances, protocol=protocol)
    if output:
        write_atomic(Path(output), program_to_python(program, source=Path(algorithm).name))
        click.echo(f"wrote {output} ({len(program.ops)} ops)")
    if xml_path:
        ir = compile_program(program, target=target)
        nbytes = checkable_size(parse_size(size), ir)
        if nbytes != parse_size(size):
            from collsynth.core.errors import CollsynthError

            raise CollsynthError(f"--size {size}: the interpreter needs whole float32 elements in every chunk; "
                                 f"use a multiple of {checkable_size(1, ir)} bytes (e.g. {nbytes})")
        result = execute(ir, backend="cpu", nbytes=nbytes, fifo_capacity=get_target(target).fifo_slots)
        if not result.passed:
            raise click.ClickException(f"the compiled program fails the interpreter: {result.message}")
        write_xml(ir, xml_path, target)
        click.echo(f"wrote {xml_path} ({ir.ngpus} GPUs, {ir.num_steps} steps; interpreter: PASS on {nbytes} B)")
    if not output and not xml_path:
        click.echo(str(program))


COMMANDS = (lower,)
