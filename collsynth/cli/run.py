"""`collsynth run FILE.xml`: execute an MSCCL-IR XML file on a backend and print the verdict."""

from __future__ import annotations

import sys

import click

from collsynth.collectives.spec import resolve_collective
from collsynth.emit.msccl_xml import read_xml
from collsynth.runtime import BACKENDS, ExecutionError, execute
from collsynth.runtime.layout import DTYPES, collective_for
from collsynth.units import parse_size


@click.command("run")
@click.argument("xml_file", type=click.Path(dir_okay=False))
@click.option("--size", default="1MB", show_default=True,
              help="Per-rank input buffer size: 1048576, 64KB, 4MB, 1GB (KB/MB/GB are powers of 1024).")
@click.option("--dtype", type=click.Choice(sorted(DTYPES) + ["bfloat16"]), default="float32", show_default=True,
              help="bfloat16 runs on the cuda backend only (numpy has no bfloat16).")
@click.option("--op", "reduce_op", type=click.Choice(["sum", "prod", "max", "min"]), default="sum", show_default=True,
              help="Reduction operator; the cpu backend reduces with sum only.")
@click.option("--backend", type=click.Choice(BACKENDS), default="cpu", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--root", type=int, default=None, help="Root rank of a rooted collective (default: inferred).")
@click.option("--collective", "collective_spec", default=None,
              help="Postcondition to check: a collective name or a JSON file (default: the XML's coll).")
def run(xml_file: str, size: str, dtype: str, reduce_op: str, backend: str, seed: int, root: int | None,
        collective_spec: str | None) -> None:
    """Run XML_FILE on every rank and check the collective's postcondition.

    Prints PASS/FAIL with collective, ranks, size, dtype and time, then one line per stuck threadblock
    or wrong chunk. Exit code 0 on PASS, 1 on FAIL, 2 on bad input."""
    if backend == "cpu" and (dtype == "bfloat16" or reduce_op != "sum"):
        raise ExecutionError("the cpu backend supports sum over float32/float16/float64/int32; use --backend cuda "
                             "for bfloat16 or prod/max/min")
    ir = read_xml(xml_file)
    given = resolve_collective(collective_spec, ir.ngpus, root=root) if collective_spec is not None else None
    collective = collective_for(ir, given, root)
    options = {"op": reduce_op} if backend == "cuda" else {}
    result = execute(ir, backend=backend, nbytes=parse_size(size), dtype=dtype, seed=seed, collective=collective,
                     **options)
    click.echo(str(result))
    if not result.passed:
        sys.exit(1)


COMMANDS = (run,)
