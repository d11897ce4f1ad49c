"""`collsynth export chakra FILE.xml -o DIR`: the IR in formats other tools load."""

from __future__ import annotations

from pathlib import Path

import click

from collsynth.cli.params import OutputPath
from collsynth.core.units import format_size, parse_size


@click.group("export")
def export() -> None:
    """Convert an MSCCL-IR XML file for other tools (Chakra execution traces)."""


@export.command("chakra")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=OutputPath(file_okay=False, path_type=Path),
              help="directory for the per-rank .et files (created if missing)")
@click.option("--prefix", default=None, help="file name stem: <prefix>.<rank>.et (default: the XML file's stem)")
@click.option("--size", "size", default="1MB", show_default=True,
              help="per-rank buffer size; each chunk is size / nchunksperloop bytes")
def chakra(file: Path, out_dir: Path, prefix: str | None, size: str) -> None:
    """Write one Chakra ET file per rank: COMM_SEND/COMM_RECV nodes for the transfers, COMP nodes for
    reductions and copies, data dependencies within each rank."""
    from collsynth.cli.ir_input import read_runnable_ir
    from collsynth.emit.chakra import export_chakra

    nbytes = parse_size(size)
    ir = read_runnable_ir(file)
    paths = export_chakra(ir, out_dir, prefix or file.stem, nbytes=nbytes)
    click.echo(f"wrote {len(paths)} Chakra ET files ({format_size(nbytes)} per rank) to {out_dir}: "
               f"{paths[0].name} .. {paths[-1].name}" if paths else f"IR {ir.name!r} has no GPUs; nothing written")


@export.command("mscclpp")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_file", required=True, type=OutputPath(dir_okay=False, path_type=Path),
              help="the execution plan to write (JSON)")
@click.option("-t", "--topology", "topology_spec", default=None,
              help="topology of the ranks (multi-node: port channels across nodes); default: one node")
@click.option("--channels", type=click.Choice(("auto", "memory", "port", "switch")), default="auto", show_default=True,
              help="channel kind: memory inside a node and port across (auto), one kind for all, or switch "
                   "(NVLink SHARP multimem ops; an AllReduce whose steps are a group reduce + broadcast per chunk)")
@click.option("--groups", type=click.IntRange(min=1), default=None,
              help="plan threadblocks per rank (IR threadblocks merged; default: one per IR threadblock where "
                   "the executor's 16 semaphores allow)")
def mscclpp(file: Path, out_file: Path, topology_spec: str | None, channels: str, groups: int | None) -> None:
    """Lower an MSCCL-IR XML file to an MSCCL++ 0.9.x execution plan; the plan is schema-checked and run by
    the plan interpreter against the collective's postcondition before it is written."""
    from collsynth.core.files import write_atomic
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.emit.mscclpp import ir_to_plan, plan_to_json
    from collsynth.runtime.plan import checked_plan
    from collsynth.topologies.io import resolve_topology

    ir = read_xml(file)
    topology = resolve_topology(topology_spec) if topology_spec else None
    if channels == "switch":
        from collsynth.core.errors import CollsynthError
        from collsynth.emit.mscclpp_switch import ir_to_switch_plan

        if topology is None:
            raise CollsynthError("--channels switch needs the topology: add -t h100_nvswitch")
        plan = ir_to_switch_plan(ir, topology)
    else:
        plan = ir_to_plan(ir, topology, channels, groups=groups)
    outcome = checked_plan(plan)
    write_atomic(out_file, plan_to_json(plan))
    ntbs = sum(len(gpu["threadblocks"]) for gpu in plan["gpus"])
    click.echo(f"wrote {out_file}: {plan['collective']} on {len(plan['gpus'])} ranks, {ntbs} threadblocks, "
               f"{outcome.steps_run} ops; plan interpreter: {outcome.message}")


COMMANDS = (export,)
