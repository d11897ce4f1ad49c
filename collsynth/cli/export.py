"""`collsynth export chakra FILE.xml -o DIR`: the IR in formats other tools load."""

from __future__ import annotations

from pathlib import Path

import click

from collsynth.core.units import format_size, parse_size


@click.group("export")
def export() -> None:
    """Convert an MSCCL-IR XML file for other tools (Chakra execution traces)."""


@export.command("chakra")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path),
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


COMMANDS = (export,)
