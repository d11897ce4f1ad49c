"""`collsynth algorithms list|show`: the hand-written algorithm library."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import click

from collsynth.cli.params import CHUNKS_OPTION, PROGRAM_RANKS_OPTION, CappedInt, OutputPath

if TYPE_CHECKING:  # rich and the library (numpy, networkx) load when a command runs, not for --help
    from collsynth.topologies.model import Topology

# Options of `show` that map to builder parameters, by parameter name.
_PARAM_OPTIONS = ("channels", "chunks", "segments", "num_nodes")


@click.group("algorithms")
def algorithms() -> None:
    """The hand-written algorithm library (ring, all-pairs, trees, hierarchical, ...)."""


@algorithms.command("list")
@click.option("--collective", "collective", default=None, help="only programs for this collective (e.g. allreduce)")
def list_command(collective: str | None) -> None:
    """The library programs: name, collective, parameters, valid rank counts."""
    from rich.console import Console
    from rich.table import Table

    from collsynth.algorithms import LIBRARY
    from collsynth.collectives import canonical_name

    table = Table(title="Algorithm library", title_justify="left")
    for column in ("name", "collective", "parameters", "ranks", "description"):
        table.add_column(column, no_wrap=column in ("name", "collective", "ranks"))
    want = canonical_name(collective) if collective else None
    for entry in LIBRARY.values():
        if want is None or entry.collective == want:
            params = ", ".join(entry.parameters + ("instances", "protocol"))
            table.add_row(entry.name, entry.collective, params, entry.ranks, entry.description)
    console = Console(highlight=False)
    if not console.is_terminal:  # piped: don't squeeze the table into 80 columns
        console = Console(highlight=False, width=160)
    console.print(table)


def _topology(spec: str | None, ranks: int | None, nodes: int | None) -> Topology:
    """The topology named by --topology, else a fully connected one of --ranks ranks (in --nodes nodes)."""
    from collsynth.algorithms import AlgorithmError

    if spec is not None:
        from collsynth.topologies import resolve_topology

        topology = resolve_topology(spec)
        if ranks is not None and ranks != topology.num_ranks:
            raise AlgorithmError(f"--ranks {ranks} disagrees with topology {spec!r} ({topology.num_ranks} ranks); "
                                 "give one of them")
        return topology
    from collsynth.topologies.library import fully_connected

    if ranks is None:
        raise AlgorithmError("give --ranks N (a fully connected topology) or --topology NAME")
    topology = fully_connected(ranks)
    if nodes is not None:
        if nodes < 1 or ranks % nodes:
            raise AlgorithmError(f"--nodes {nodes} does not divide --ranks {ranks} into equal nodes")
        topology = replace(topology, name=f"{topology.name}/{nodes}nodes",
                           machines=tuple(r // (ranks // nodes) for r in range(ranks)))
    return topology


@algorithms.command("show")
@click.argument("name")
@click.option("--ranks", type=PROGRAM_RANKS_OPTION, default=None, help="number of ranks (fully connected topology)")
@click.option("--nodes", type=CappedInt(1), default=None,
              help="split --ranks into this many nodes (multi-node programs)")
@click.option("--topology", "topology_spec", default=None, help="a topology name or JSON file instead of --ranks")
@click.option("--channels", type=CappedInt(1, maximum=32), default=None, help="channels (ring programs)")
@click.option("--chunks", type=CHUNKS_OPTION, default=None, help="chunk factor")
@click.option("--segments", type=CHUNKS_OPTION, default=None, help="pipeline segments (tree programs)")
@click.option("--instances", type=CappedInt(1, maximum=32), default=1, show_default=True,
              help="instances (compiler replication)")
@click.option("--protocol", type=click.Choice(["Simple", "LL", "LL128"]), default="Simple", show_default=True)
@click.option("--inplace", is_flag=True, help="the in-place variant of the collective")
@click.option("-o", "--output", "output", type=OutputPath(dir_okay=False), default=None,
              help="write the MSCCL-IR XML here (default: print it)")
@click.option("--check", "check_size", default=None,
              help="also run the CPU interpreter on this many bytes per rank (e.g. 1MB) and print the verdict")
def show_command(name: str, ranks: int | None, nodes: int | None, topology_spec: str | None, channels: int | None,
                 chunks: int | None, segments: int | None, instances: int, protocol: str, inplace: bool,
                 output: str | None, check_size: str | None) -> None:
    """Compile library program NAME and print (or write) its MSCCL-IR XML."""
    from collsynth.algorithms import AlgorithmError, build, library_entry
    from collsynth.compiler import compile_program
    from collsynth.emit.msccl_xml import ir_to_xml, write_xml

    entry = library_entry(name)
    topology = _topology(topology_spec, ranks, nodes)
    given = {"channels": channels, "chunks": chunks, "segments": segments,
             "num_nodes": nodes if topology_spec is not None else None}
    params: dict[str, Any] = {}
    for key in _PARAM_OPTIONS:
        if given[key] is None:
            continue
        if key not in entry.parameters:
            if key == "num_nodes":
                continue  # --nodes only shaped the fully connected topology
            raise AlgorithmError(f"{entry.name} takes no --{key}; it takes: {', '.join(entry.parameters)}")
        params[key] = given[key]
    if inplace:
        if not entry.inplace:
            raise AlgorithmError(f"{entry.name} has no in-place variant; leave out --inplace")
        params["inplace"] = True
    program = build(entry.name, topology, instances=instances, protocol=protocol, **params)
    ir = compile_program(program)
    if output is None:
        click.echo(ir_to_xml(ir), nl=False)
    else:
        write_xml(ir, output)
        click.echo(f"wrote {output}: {entry.name}, {ir.ngpus} ranks, {ir.nchannels} channels, "
                   f"{ir.num_steps} steps", err=True)
    if check_size is not None:
        from collsynth.compiler import instance_collective
        from collsynth.core.units import parse_size
        from collsynth.runtime import execute

        result = execute(ir, backend="cpu", nbytes=parse_size(check_size),
                         collective=instance_collective(program.collective, program.instances))
        click.echo(result.verdict(), err=True)
        if not result.passed:
            raise SystemExit(1)


COMMANDS = (algorithms,)
