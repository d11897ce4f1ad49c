"""`collsynth sim FILE.xml ... --topology T --sizes 1KB:1GB`: nccl-tests style timings and busbw plots."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from collsynth.cli.params import OutputPath
from collsynth.core.units import parse_size

if TYPE_CHECKING:  # the simulator (numpy, networkx) loads when the command runs, not for --help
    from collsynth.sim import SimResult


def parse_sizes(text: str) -> list[int]:
    """`1KB:1GB` (doubling, like nccl-tests -b/-e -f 2), `1KB:1GB:4` (factor 4), or `1MB,4MB,64MB`."""
    from collsynth.sim import size_sweep
    from collsynth.sim.nccl import SimError

    text = text.strip()
    if ":" in text:
        parts = text.split(":")
        if len(parts) not in (2, 3):
            raise SimError(f"cannot read sizes {text!r}; write LO:HI or LO:HI:FACTOR, e.g. 1KB:1GB")
        factor = 2
        if len(parts) == 3:
            try:
                factor = int(parts[2])
            except ValueError:
                raise SimError(f"size factor {parts[2]!r} in {text!r} is not an integer") from None
        return size_sweep(parse_size(parts[0]), parse_size(parts[1]), factor)
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise SimError("no sizes given; write e.g. --sizes 1KB:1GB or --sizes 1MB,64MB")
    return sizes


@click.command("sim")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option("-t", "--topology", "topology_spec", required=True,
              help="built-in topology (ring:8, dgx1, ...) or a JSON file; IR gpu i runs on rank i")
@click.option("-s", "--sizes", default="1KB:1GB", show_default=True,
              help="LO:HI doubling like nccl-tests -b/-e, LO:HI:FACTOR, or a comma list of sizes")
@click.option("-d", "--dtype", default="float32", show_default=True,
              help="element type for the count column: float32, float16/half, bfloat16, float64, int8, int32, ...")
@click.option("--plot", "plot_path", type=OutputPath(dir_okay=False, path_type=Path),
              help="also draw busbw vs size for all FILES into this .png/.svg/.pdf")
@click.option("--json", "as_json", is_flag=True, help="print the results as JSON instead of tables")
@click.option("--tile", "tile", default=None, help="bytes per MSCCL loop tile (default: by the IR's protocol)")
def sim(files: tuple[Path, ...], topology_spec: str, sizes: str, dtype: str, plot_path: Path | None,
        as_json: bool, tile: str | None) -> None:
    """Time MSCCL-IR XML FILES on a topology with the alpha-beta model (links and switches serialize
    the transfers that share them) and print nccl-tests columns: size, count, type, time, algbw, busbw."""
    from collsynth.cli.ir_input import read_runnable_ir
    from collsynth.sim import SimModel, simulate
    from collsynth.sim.nccl import dtype_info
    from collsynth.topologies import resolve_topology

    dtype_info(dtype)  # an unknown type fails before any file is read
    topology = resolve_topology(topology_spec)
    size_list = parse_sizes(sizes)
    model = SimModel(tile_bytes=parse_size(tile) if tile is not None else None)
    results: list[SimResult] = []
    for path in files:
        ir = read_runnable_ir(path)
        results.append(simulate(ir, topology, size_list, dtype=dtype, model=model))
    if plot_path is not None:
        from collsynth.sim.plot import plot_busbw

        plot_busbw(results, plot_path)
    if as_json:
        click.echo(json.dumps([result.to_dict() for result in results], indent=2))
    else:
        click.echo("\n\n".join(result.table() for result in results))
    if plot_path is not None:
        click.echo(f"plot: {plot_path}", err=as_json)


COMMANDS = (sim,)
