"""`collsynth synth milp`: TACCL-style MILP synthesis from a communication sketch."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from collsynth.cli.params import ROOT_OPTION, SECONDS, OutputPath
from collsynth.core.errors import CollsynthError
from collsynth.core.files import read_json_file, write_atomic
from collsynth.core.units import parse_size

if TYPE_CHECKING:  # the MILP's modules (numpy, networkx, pulp) load when the command runs, not for --help
    from collsynth.encodings.sketch import Sketch
    from collsynth.synth.milp import MilpResult
    from collsynth.topologies import Topology


class MilpCliError(CollsynthError):
    """Bad command-line input for `synth milp`."""


def _load_topology(spec: str, sketch: Sketch, taccl_costs: bool) -> tuple[Topology, str]:
    """The topology, expanded to the sketch's number of nodes when it names one node; plus a note."""
    from collsynth.topologies import TopologyError, resolve_topology

    if taccl_costs:
        from collsynth.topologies.taccl import is_taccl_profile, load_taccl_profile

        path = Path(spec)
        if not path.is_file():
            raise MilpCliError(f"--taccl-costs needs a TACCL profile JSON file, got {spec!r}")
        data = read_json_file(path, MilpCliError, "the TACCL profile")
        if not is_taccl_profile(data):
            raise MilpCliError(f"{spec}: --taccl-costs needs a TACCL profile (gpus_per_node, alpha, ...)")
        name = str(data.get("name") or path.stem)
        return load_taccl_profile(data, name=name, num_nodes=sketch.num_nodes, taccl_costs=True), \
            "intra-node links charged TACCL's invbw (--taccl-costs)"
    topology = resolve_topology(spec)
    if topology.num_machines == 1 and sketch.num_nodes > 1:
        try:
            return resolve_topology(f"{sketch.num_nodes}x{spec}"), \
                f"expanded to {sketch.num_nodes} nodes ({sketch.num_nodes}x{spec}) as the sketch asks"
        except TopologyError as exc:
            raise MilpCliError(f"the sketch is for {sketch.num_nodes} nodes but {spec!r} is one node and cannot be "
                               f"expanded ({exc}); give a {sketch.num_nodes}-node topology") from None
    return topology, ""


@click.command("milp")
@click.argument("topology")
@click.argument("collective")
@click.option("--sketch", "sketch_path", required=True, type=click.Path(dir_okay=False),
              help="communication sketch JSON (TACCL's format or ours, docs/formats.md)")
@click.option("--size", "size", default="1MB", show_default=True,
              help="data per chunk before chunkup: AllGather input per rank, AllToAll block per pair, "
                   "AllReduce buffer / ranks (e.g. 1MB, 64KB)")
@click.option("--solver", type=click.Choice(["cbc", "highs"]), default="cbc", show_default=True,
              help="MILP solver: CBC (bundled with PuLP) or HiGHS (highspy, usually faster)")
@click.option("--time-limit", type=SECONDS, default=None, help="wall-clock budget of the whole run in seconds "
              "(the MILP stages share it); when it runs out the best verified schedule so far is returned with "
              "its proven gap, marked time-limited")
@click.option("--gap", "mip_gap", type=float, default=1e-4, show_default=True, help="relative MIP gap to stop at")
@click.option("--root", type=ROOT_OPTION, default=None, help="root rank for rooted collectives")
@click.option("--taccl-costs", is_flag=True, help="TOPOLOGY is a TACCL profile: charge intra-node links its invbw "
              "(as TACCL does) so that times compare one to one with TACCL's")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None, help="write the algorithm JSON here")
@click.option("--report", "report_dir", type=OutputPath(file_okay=False), default=None,
              help="write report.md, timeline.png/.txt, algorithm.json and report.json into this directory")
@click.option("--timeline/--no-timeline", default=False, help="print the text timeline")
def milp(topology: str, collective: str, sketch_path: str, size: str, solver: str, time_limit: float | None,
         mip_gap: float, root: int | None, taccl_costs: bool, output: str | None, report_dir: str | None,
         timeline: bool) -> None:
    """Synthesize COLLECTIVE on TOPOLOGY with routing and scheduling MILPs restricted by a sketch (TACCL-style).

    TOPOLOGY is a built-in (ndv2, 2xdgx2, ...) or a JSON file (ours or a TACCL profile); a one-node
    topology is expanded to the sketch's number of nodes. Prints the stages (model sizes, solver
    times, status, gap) and the predicted time in microseconds."""
    from collsynth.core.signals import keeping_finished_work
    from collsynth.encodings.sketch import load_sketch
    from collsynth.synth.milp import MilpInterrupted, synthesize_milp

    if mip_gap < 0:
        raise MilpCliError(f"--gap must be >= 0, got {mip_gap}")
    sketch = load_sketch(sketch_path)
    topo, note = _load_topology(topology, sketch, taccl_costs)
    nbytes = parse_size(size)
    try:
        result = synthesize_milp(topo, collective, sketch, nbytes, solver=solver, time_limit=time_limit,
                                 gap=mip_gap, root=root)
    except MilpInterrupted as stop:  # Ctrl-C or SIGTERM: the best verified schedule so far is written, then exit 130
        with keeping_finished_work(stop):
            _emit(stop.result, note, output, report_dir, timeline)
            click.echo("interrupted: kept the best verified schedule found so far", err=True)
        raise
    _emit(result, note, output, report_dir, timeline)


def _emit(result: MilpResult, note: str, output: str | None, report_dir: str | None, timeline: bool) -> None:
    """Print the note and the summary (and timeline); write the algorithm JSON and the report where asked."""
    from collsynth.synth.milp import write_report
    from collsynth.synth.timeline import timeline_text

    if note:
        click.echo(f"note: {note}")
    click.echo(result.summary())
    if timeline:
        click.echo(timeline_text(result.best))
    if output:
        write_atomic(Path(output), result.best.to_json())
        click.echo(f"wrote {output}")
    if report_dir:
        files = write_report(result, report_dir)
        click.echo(f"wrote report to {report_dir} ({', '.join(p.name for p in files)})")


SYNTH_COMMANDS = (milp,)

