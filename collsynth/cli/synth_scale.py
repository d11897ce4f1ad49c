"""`collsynth synth greedy|auto|trees|hier`: cluster-scale synthesis (issue 10).

Each prints the model time of the schedule, the cut lower bound and their ratio; `-o` writes the verified
algorithm JSON and `--report DIR` writes the algorithm, the bound and a summary. `auto` is anytime: every
schedule that beats the best so far is printed and (with `-o`) saved as it is found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from collsynth.cli.params import CHUNKS_OPTION, ROOT_OPTION, SECONDS, SEED, FiniteFloat, OutputPath
from collsynth.cli.synth import SynthCliError, _problem
from collsynth.core.files import write_atomic
from collsynth.core.units import parse_size

if TYPE_CHECKING:  # the synthesizers' modules (numpy, networkx) load when a command runs, not for --help
    from collsynth.collectives import Collective
    from collsynth.encodings.cut_bounds import CutBound
    from collsynth.schedule import Algorithm, SynthesisResult
    from collsynth.topologies import Topology

# Largest instance the exact synthesizers (SMT, MILP) finish on in minutes on a laptop (issue 10's figures).
EXACT_MAX_RANKS = 16


def _options(function: Any) -> Any:
    for option in reversed((
        click.argument("topology"), click.argument("collective"),
        click.option("--size", default="1G", show_default=True, help="Buffer size (nccl-tests' size): 1G, 64M, ..."),
        click.option("--chunks", "-c", type=CHUNKS_OPTION, default=1, show_default=True,
                     help="Chunks per buffer slot."),
        click.option("--root", type=ROOT_OPTION, default=None, help="Root rank of rooted collectives (default 0)."),
        click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the tie-break permutation."),
        click.option("--link-gbps", type=FiniteFloat(0.0, example="50"), default=None,
                     help="Set every link to this many GB/s (e.g. 50 for TACOS's torus setting)."),
        click.option("--link-alpha-us", type=FiniteFloat(0.0, inclusive=True, example="0.5"), default=0.5,
                     show_default=True, help="Link latency used with --link-gbps."),
        click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None,
                     help="Write the algorithm JSON here."),
        click.option("--report", "report_dir", type=OutputPath(file_okay=False), default=None,
                     help="Write algorithm.json, bound.json and summary.txt into this directory."),
    )):
        function = option(function)
    return function


def cut_bound_us(topology: Topology, collective: Collective, size_bytes: int) -> CutBound:
    """`encodings.cut_bounds.cut_bound_us`, imported when first called (a module attribute: tests replace it)."""
    from collsynth.encodings.cut_bounds import cut_bound_us as bound

    return bound(topology, collective, size_bytes)


def _instance(topology: str, collective: str, chunks: int, root: int | None, link_gbps: float | None,
              alpha: float, supported: tuple[str, ...] | None = None, command: str = "greedy") -> tuple[Topology, Any]:
    """The problem of `synth COMMAND`; `supported`: the collectives it takes (default: greedy's)."""
    from collsynth.synth.cluster.greedy import SUPPORTED
    from collsynth.topologies.cluster import relinked

    supported = SUPPORTED if supported is None else supported
    topo, coll = _problem(topology, collective, chunks, root)
    if coll.name not in supported:
        raise SynthCliError(f"synth {command} does not support {coll.name!r}; supported: {', '.join(supported)}")
    if link_gbps is not None:
        if link_gbps <= 0 or alpha < 0:
            raise SynthCliError("--link-gbps must be > 0 and --link-alpha-us >= 0")
        topo = relinked(topo, alpha, link_gbps)
    return topo, coll


def _finish(result: SynthesisResult, topo: Topology, coll: Any, size: int, output: str | None,
            report_dir: str | None) -> None:
    algorithm = result.algorithm
    assert algorithm is not None
    from collsynth.synth.cluster.auto import model_us

    makespan = model_us(algorithm, size)
    head = [f"{result.synthesizer}: {coll.name} on {topo.name} ({topo.num_ranks} ranks), size {size} B",
            f"  steps {algorithm.num_steps}, sends {sum(len(s.sends) for s in algorithm.steps)}, "
            f"synthesized in {result.seconds:.2f} s"]
    try:
        bound = cut_bound_us(topo, coll, size)
    except KeyboardInterrupt as stop:  # the schedule is finished and verified: keep it (without the bound), exit 130
        _keep_interrupted(stop, algorithm, [*head, f"  model time {makespan:.1f} us"], output, report_dir)
        raise
    lines = [*head,
             f"  model time {makespan:.1f} us; cut bound {bound}; ratio {makespan / bound.time_us:.3f}"
             if bound.time_us > 0 else f"  model time {makespan:.1f} us",
             *(f"  {stage}" for stage in result.stages)]
    click.echo("\n".join(lines))
    _write(algorithm, lines, {"time_us": bound.time_us, "kind": bound.kind, "ranks": list(bound.ranks),
                              "model_time_us": makespan}, output, report_dir)


def _write(algorithm: Algorithm, lines: list[str], bound: dict[str, Any] | None, output: str | None,
           report_dir: str | None) -> None:
    """-o: the algorithm JSON; --report: algorithm.json, bound.json (when the bound is known), summary.txt."""
    if output:
        algorithm.write_json(Path(output))
    if report_dir:
        folder = Path(report_dir)
        folder.mkdir(parents=True, exist_ok=True)
        algorithm.write_json(folder / "algorithm.json")
        if bound is not None:
            write_atomic(folder / "bound.json", json.dumps(bound))
        write_atomic(folder / "summary.txt", "\n".join(lines) + "\n")


def _keep_interrupted(stop: BaseException, algorithm: Algorithm, lines: list[str], output: str | None,
                      report_dir: str | None) -> None:
    """Ctrl-C or SIGTERM (`stop`) with a verified schedule in hand: write it (summary marked interrupted, no
    bound.json), the interrupted frames dropped first and further signals held until the files are complete."""
    from collsynth.core.signals import keeping_finished_work

    lines = [*lines, "  interrupted: this is the best verified schedule found so far (cut bound not computed)"]
    with keeping_finished_work(stop):
        click.echo("\n".join(lines))
        _write(algorithm, lines, None, output, report_dir)
        click.echo("interrupted: kept the best verified schedule found so far", err=True)


@click.command("greedy")
@_options
def greedy_command(topology: str, collective: str, size: str, chunks: int, root: int | None, seed: int,
                   link_gbps: float | None, link_alpha_us: float, output: str | None, report_dir: str | None) -> None:
    """Time-expanded greedy (TACOS-like) schedule of COLLECTIVE on TOPOLOGY, verified and timed."""
    from collsynth.synth.cluster.greedy import greedy

    nbytes = parse_size(size)
    topo, coll = _instance(topology, collective, chunks, root, link_gbps, link_alpha_us)
    _finish(greedy(topo, coll, nbytes, seed=seed), topo, coll, nbytes, output, report_dir)


@click.command("auto")
@_options
@click.option("--time-limit", type=SECONDS, default=60.0, show_default=True, help="Seconds for the whole run.")
def auto_command(topology: str, collective: str, size: str, chunks: int, root: int | None, seed: int,
                 link_gbps: float | None, link_alpha_us: float, output: str | None, report_dir: str | None,
                 time_limit: float) -> None:
    """Pick the synthesizer by instance size and run it (see `collsynth.synth.cluster.auto`)."""
    from collsynth.synth.cluster.auto import auto

    if time_limit <= 0:
        raise SynthCliError(f"--time-limit must be > 0, got {time_limit}")
    nbytes = parse_size(size)
    topo, coll = _instance(topology, collective, chunks, root, link_gbps, link_alpha_us)

    best: list[tuple[str, Algorithm, float]] = []  # the best schedule found so far (anytime)

    def found(label: str, algorithm: Algorithm, time_us: float) -> None:  # anytime: print and save as found
        click.echo(f"found: {label}: model time {time_us:.1f} us")
        best[:] = [(label, algorithm, time_us)]
        if output:
            algorithm.write_json(Path(output))

    try:
        result = auto(topo, coll, nbytes, time_limit=time_limit, seed=seed, on_found=found)
    except KeyboardInterrupt as stop:
        if best:
            label, algorithm, time_us = best[0]
            lines = [f"auto: {coll.name} on {topo.name} ({topo.num_ranks} ranks), size {nbytes} B",
                     f"  best so far: {label}; model time {time_us:.1f} us"]
            _keep_interrupted(stop, algorithm, lines, output, report_dir)
        raise
    _finish(result, topo, coll, nbytes, output, report_dir)


@click.command("trees")
@_options
@click.option("--chunks-per-tree", type=CHUNKS_OPTION, default=2, show_default=True,
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


@click.command("hier")
@_options
@click.option("--sources", default=None,
              help="Phase schedule sources to try, comma-separated: direct, ring, doubling, smt, greedy "
                   "(default: direct,ring,smt in a node; direct,ring,doubling across nodes).")
@click.option("--all", "all_dir", type=click.Path(file_okay=False), default=None,
              help="Also write every candidate's algorithm JSON into this directory.")
def hier_command(topology: str, collective: str, size: str, chunks: int, root: int | None, seed: int,
                 link_gbps: float | None, link_alpha_us: float, output: str | None, report_dir: str | None,
                 sources: str | None, all_dir: str | None) -> None:
    """Hierarchical composition on NxTOPO: node and rail phase schedules, best at --size first."""
    from collsynth.synth.cluster.hierarchical import SUPPORTED as COMPOSED
    from collsynth.synth.cluster.hierarchical import hierarchical

    nbytes = parse_size(size)
    topo, coll = _instance(topology, collective, chunks, root, link_gbps, link_alpha_us, COMPOSED, "hier")
    chosen = [s.strip() for s in sources.split(",") if s.strip()] if sources else None
    result = hierarchical(topo, coll, nbytes, sources=chosen)
    for algorithm in result.algorithms:
        click.echo(f"candidate {algorithm.name}: {algorithm.num_steps} steps, model time "
                   f"{algorithm.provenance['model_time_us']:.1f} us")
    if all_dir:
        folder = Path(all_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for algorithm in result.algorithms:
            algorithm.write_json(folder / f"{algorithm.name}.json")
    _finish(result, topo, coll, nbytes, output, report_dir)


SYNTH_COMMANDS = (greedy_command, auto_command, trees_command, hier_command)
