"""`collsynth synth greedy` and `collsynth synth auto`: cluster-scale synthesis (issue 10).

Both print the model time of the schedule, the cut lower bound and their ratio; `-o` writes the verified
algorithm JSON and `--report DIR` writes the algorithm, the bound and a summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from collsynth.cli.params import OutputPath
from collsynth.cli.synth import SynthCliError, _problem
from collsynth.core.files import write_atomic
from collsynth.core.units import parse_size
from collsynth.encodings.cut_bounds import cut_bound_us
from collsynth.schedule import SynthesisResult
from collsynth.synth.cluster.greedy import SUPPORTED, greedy
from collsynth.topologies import Topology
from collsynth.topologies.cluster import relinked

# Largest instance the exact synthesizers (SMT, MILP) finish on in minutes on a laptop (issue 10's figures).
EXACT_MAX_RANKS = 16


def _options(function: Any) -> Any:
    for option in reversed((
        click.argument("topology"), click.argument("collective"),
        click.option("--size", default="1G", show_default=True, help="Buffer size (nccl-tests' size): 1G, 64M, ..."),
        click.option("--chunks", "-c", type=int, default=1, show_default=True, help="Chunks per buffer slot."),
        click.option("--root", type=int, default=None, help="Root rank of rooted collectives (default 0)."),
        click.option("--seed", type=int, default=0, show_default=True, help="Seed of the tie-break permutation."),
        click.option("--link-gbps", type=float, default=None,
                     help="Set every link to this many GB/s (e.g. 50 for TACOS's torus setting)."),
        click.option("--link-alpha-us", type=float, default=0.5, show_default=True,
                     help="Link latency used with --link-gbps."),
        click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
                     help="Write the algorithm JSON here."),
        click.option("--report", "report_dir", type=OutputPath(file_okay=False), default=None,
                     help="Write algorithm.json, bound.json and summary.txt into this directory."),
    )):
        function = option(function)
    return function


def _instance(topology: str, collective: str, chunks: int, root: int | None, link_gbps: float | None,
              alpha: float) -> tuple[Topology, Any]:
    topo, coll = _problem(topology, collective, chunks, root)
    if coll.name not in SUPPORTED:
        raise SynthCliError(f"synth greedy does not support {coll.name!r}; supported: {', '.join(SUPPORTED)}")
    if link_gbps is not None:
        if link_gbps <= 0 or alpha < 0:
            raise SynthCliError("--link-gbps must be > 0 and --link-alpha-us >= 0")
        topo = relinked(topo, alpha, link_gbps)
    return topo, coll


def _finish(result: SynthesisResult, topo: Topology, coll: Any, size: int, output: str | None,
            report_dir: str | None) -> None:
    algorithm = result.algorithm
    assert algorithm is not None
    bound = cut_bound_us(topo, coll, size)
    makespan = float(algorithm.provenance["makespan_us"])
    lines = [f"{result.synthesizer}: {coll.name} on {topo.name} ({topo.num_ranks} ranks), size {size} B",
             f"  steps {algorithm.num_steps}, sends {sum(len(s.sends) for s in algorithm.steps)}, "
             f"synthesized in {result.seconds:.2f} s",
             f"  model time {makespan:.1f} us; cut bound {bound}; ratio {makespan / bound.time_us:.3f}"
             if bound.time_us > 0 else f"  model time {makespan:.1f} us",
             *(f"  {stage}" for stage in result.stages)]
    click.echo("\n".join(lines))
    if output:
        write_atomic(Path(output), algorithm.to_json())
    if report_dir:
        folder = Path(report_dir)
        folder.mkdir(parents=True, exist_ok=True)
        write_atomic(folder / "algorithm.json", algorithm.to_json())
        write_atomic(folder / "bound.json", json.dumps({"time_us": bound.time_us, "kind": bound.kind,
                                                       "ranks": list(bound.ranks), "model_time_us": makespan}))
        write_atomic(folder / "summary.txt", "\n".join(lines) + "\n")


@click.command("greedy")
@_options
def greedy_command(topology: str, collective: str, size: str, chunks: int, root: int | None, seed: int,
                   link_gbps: float | None, link_alpha_us: float, output: str | None, report_dir: str | None) -> None:
    """Time-expanded greedy (TACOS-like) schedule of COLLECTIVE on TOPOLOGY, verified and timed."""
    nbytes = parse_size(size)
    topo, coll = _instance(topology, collective, chunks, root, link_gbps, link_alpha_us)
    _finish(greedy(topo, coll, nbytes, seed=seed), topo, coll, nbytes, output, report_dir)


@click.command("auto")
@_options
@click.option("--time-limit", type=float, default=60.0, show_default=True, help="Seconds for the whole run.")
def auto_command(topology: str, collective: str, size: str, chunks: int, root: int | None, seed: int,
                 link_gbps: float | None, link_alpha_us: float, output: str | None, report_dir: str | None,
                 time_limit: float) -> None:
    """Pick the synthesizer by instance size and run it (see `collsynth.synth.cluster.auto`)."""
    from collsynth.synth.cluster.auto import auto

    if time_limit <= 0:
        raise SynthCliError(f"--time-limit must be > 0, got {time_limit}")
    nbytes = parse_size(size)
    topo, coll = _instance(topology, collective, chunks, root, link_gbps, link_alpha_us)
    _finish(auto(topo, coll, nbytes, time_limit=time_limit, seed=seed), topo, coll, nbytes, output, report_dir)


@click.command("trees")
@_options
@click.option("--chunks-per-tree", type=int, default=2, show_default=True,
              help="Pipeline depth: chunks of a root's data per tree.")
def trees_command(topology: str, collective: str, size: str, chunks: int, root: int | None, seed: int,
                  link_gbps: float | None, link_alpha_us: float, output: str | None, report_dir: str | None,
                  chunks_per_tree: int) -> None:
    """Spanning-tree packing (certified against the cut bound where it meets it), pipelined."""
    from collsynth.synth.cluster.trees import trees

    if chunks_per_tree < 1:
        raise SynthCliError(f"--chunks-per-tree must be >= 1, got {chunks_per_tree}")
    nbytes = parse_size(size)
    topo, coll = _instance(topology, collective, chunks, root, link_gbps, link_alpha_us)
    result = trees(topo, coll, nbytes, chunks_per_tree=chunks_per_tree)
    algorithm = result.algorithm
    assert algorithm is not None
    facts = algorithm.provenance
    verdict = "certified optimal" if facts["certified_optimal"] else "not certified"
    click.echo(f"packing: {facts['packing']}; unit time {facts['packing_time_us']:.1f} us "
               f"vs cut bound {facts['cut_bound_us']:.1f} us: {verdict}")
    _finish(result, topo, algorithm.collective, nbytes, output, report_dir)


SYNTH_COMMANDS = (greedy_command, auto_command, trees_command)
