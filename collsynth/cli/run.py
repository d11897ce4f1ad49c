"""`collsynth run FILE.xml`: execute an MSCCL-IR XML file on a backend and print the verdict."""

from __future__ import annotations

import sys

import click

from collsynth.cli.params import SEED, CappedInt
from collsynth.core.caps import BUFFER_BYTES
from collsynth.core.units import parse_size

# The runtime's names (runtime.BACKENDS, numerics.FORMATS and REDUCTION_OPS), spelled here so that --help does not
# import the runtime (numpy); tests/cli/test_startup_imports.py checks that they are the runtime's.
BACKEND_NAMES = ("cpu", "cuda")
FORMAT_NAMES = ("float32", "float16", "bfloat16", "float64", "int32")
OP_NAMES = ("sum", "prod", "max", "min")
# Plain strings checked in the command (not click.Choice) so that a bad value is one `error:` line, exit 2.
_DTYPE_METAVAR = "[" + "|".join(FORMAT_NAMES) + "]"
_OP_METAVAR = "[" + "|".join(OP_NAMES) + "]"


@click.command("run")
@click.argument("xml_file", type=click.Path(dir_okay=False))
@click.option("--size", default="1MB", show_default=True,
              help="Per-rank input buffer size: 1048576, 64KB, 4MB, 1GB (KB/MB/GB are powers of 1024).")
@click.option("--dtype", default="float32", show_default=True, metavar=_DTYPE_METAVAR,
              help="Element type (aliases bf16, fp16, fp32 accepted); float64 runs on the cpu backend only.")
@click.option("--op", "reduce_op", default="sum", show_default=True, metavar=_OP_METAVAR,
              help="Reduction operator (NCCL's redop: the XML does not carry it).")
@click.option("--backend", type=click.Choice(BACKEND_NAMES), default="cpu", show_default=True)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the random inputs (0 .. 2**32-1).")
@click.option("--root", type=CappedInt(0), default=None, help="Root rank of a rooted collective (default: inferred).")
@click.option("--collective", "collective_spec", default=None,
              help="Postcondition to check: a collective name or a JSON file (default: the XML's coll).")
def run(xml_file: str, size: str, dtype: str, reduce_op: str, backend: str, seed: int, root: int | None,
        collective_spec: str | None) -> None:
    """Run XML_FILE (MSCCL-IR; a .json file: an MSCCL++ execution plan, on the plan interpreter) on every rank
    and check the collective's postcondition.

    Prints PASS/FAIL with collective, ranks, size, dtype (and op, unless sum) and time, then one line per
    stuck threadblock or wrong chunk. Exit code 0 on PASS, 1 on FAIL, 2 on bad input."""
    from collsynth.collectives.spec import resolve_collective
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.runtime import execute
    from collsynth.runtime.layout import collective_for
    from collsynth.runtime.numerics import number_format, reduction_op

    dtype = number_format(dtype).name
    reduce_op = reduction_op(reduce_op)
    if xml_file.endswith(".json"):
        if backend != "cpu":
            raise click.UsageError("an MSCCL++ plan (.json) runs on the plan interpreter; drop --backend")
        _run_plan(xml_file, size, dtype, reduce_op, seed, collective_spec, root)
        return
    ir = read_xml(xml_file)
    given = resolve_collective(collective_spec, ir.ngpus, root=root) if collective_spec is not None else None
    collective = collective_for(ir, given, root)
    nbytes = parse_size(size)
    BUFFER_BYTES.check(nbytes * ir.ngpus, f"--size {size} on {ir.ngpus} ranks (bytes of all input buffers)")
    result = execute(ir, backend=backend, nbytes=nbytes, dtype=dtype, seed=seed, collective=collective,
                     op=reduce_op)
    click.echo(str(result))
    if not result.passed:
        sys.exit(1)


def _run_plan(path: str, size: str, dtype: str, reduce_op: str, seed: int, collective_spec: str | None,
              root: int | None) -> None:
    """`collsynth run plan.json`: an MSCCL++ execution plan, on the plan interpreter."""
    from collsynth.collectives.spec import resolve_collective
    from collsynth.core.files import read_json_file
    from collsynth.emit.mscclpp_schema import PlanSchemaError, check_plan
    from collsynth.runtime.plan import execute_plan

    plan = read_json_file(path, PlanSchemaError, "the execution plan")
    check_plan(plan)
    given = resolve_collective(collective_spec, len(plan["gpus"]), root=root) if collective_spec else None
    result = execute_plan(plan, nbytes=parse_size(size), dtype=dtype, seed=seed, op=reduce_op, collective=given)
    click.echo(str(result))
    if not result.passed:
        sys.exit(1)


COMMANDS = (run,)
