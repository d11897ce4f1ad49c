"""`collsynth tune TOPO COLL --sizes 1KB:1GB [--algorithms FILES...] [--report DIR]`: the best configuration
(algorithm, protocol, instances, threadblock layout, message merging) per size, found AutoCCL-style."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from collsynth.cli.params import OutputPath


@click.command("tune")
@click.argument("topology_spec", metavar="TOPO")
@click.argument("collective", metavar="COLL")
@click.option("-s", "--sizes", default="1KB:1GB", show_default=True,
              help="LO:HI (x4 steps), LO:HI:FACTOR, or a comma list of sizes (nccl-tests sizes)")
@click.option("-a", "--algorithms", "files", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="algorithm JSON files (Pareto points, MILP schedules); repeat the option for several")
@click.option("--synth/--no-synth", default=None,
              help="also synthesize the SMT Pareto frontier (default: only when no --algorithms are given)")
@click.option("--max-chunks", default=6, show_default=True, help="chunk counts the frontier sweep tries")
@click.option("--library/--no-library", default=True, show_default=True, help="tune the hand-written programs too")
@click.option("--backend", default="sim", show_default=True, type=click.Choice(["sim", "cuda"]),
              help="time with the simulator or on the GPU")
@click.option("--report", "report_dir", type=OutputPath(file_okay=False, path_type=Path),
              help="write tune.md, tune.json and the plots (search, busbw vs size) here")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.option("--backends", default="ir", show_default=True,
              help="runtimes to choose from per size: ir (MSCCL-IR), mscclpp (execution plans), or ir,mscclpp")
def tune(topology_spec: str, collective: str, sizes: str, files: tuple[Path, ...], synth: bool | None,
         max_chunks: int, library: bool, backend: str, report_dir: Path | None, as_json: bool, backends: str) -> None:
    """Tune COLL on TOPO per size: every algorithm x protocol, coordinate descent over the resources.
    Ctrl-C keeps (prints and reports) the sizes already tuned."""
    from collsynth.collectives.spec import STANDARD, canonical_name
    from collsynth.topologies import resolve_topology
    from collsynth.tune import Evaluator, TuneError, tune_sizes
    from collsynth.tune.candidates import (
        file_candidates,
        frontier_candidates,
        library_candidates,
        parse_size_range,
    )
    from collsynth.tune.report import table, write_report

    if canonical_name(collective) not in STANDARD:
        raise TuneError(f"unknown collective {collective!r}; use one of {', '.join(sorted(STANDARD))}")
    size_list = parse_size_range(sizes)
    topology = resolve_topology(topology_spec)
    candidates = file_candidates(files, topology, collective)
    if synth or (synth is None and not files):
        candidates += frontier_candidates(topology, collective, max_chunks=max_chunks)
    if library:
        candidates += library_candidates(topology, collective)
    if not candidates:
        raise TuneError(f"nothing to tune for {collective} on {topology.name}; give --algorithms FILES or --synth")
    evaluator = Evaluator(topology, candidates, backend=backend)

    def progress(result) -> None:  # type: ignore[no-untyped-def]
        best = result.best.label() if result.best else "(nothing runs)"
        click.echo(f"  {result.size} B: {best} ({result.evaluations} evaluations)", err=True)

    runtimes = _backends(backends)
    run = tune_sizes(evaluator, canonical_name(collective), size_list, on_size=progress)
    if runtimes == ("ir",):
        click.echo(json.dumps(run.to_dict(), indent=1) if as_json else table(run))
    else:
        _echo_backends(run, evaluator, runtimes, as_json)
    if report_dir is not None:
        for path in write_report(run, report_dir):
            click.echo(f"wrote {path}", err=True)
    if run.interrupted:
        click.echo("interrupted", err=True)
        sys.exit(130)


def _backends(text: str) -> tuple[str, ...]:
    from collsynth.tune import TuneError
    from collsynth.tune.backend import BACKENDS

    names = tuple(dict.fromkeys(part.strip() for part in text.split(",") if part.strip()))
    if not names or any(name not in BACKENDS for name in names):
        raise TuneError(f"cannot read --backends {text!r}; write ir, mscclpp or ir,mscclpp")
    return names


def _echo_backends(run, evaluator, runtimes: tuple[str, ...], as_json: bool) -> None:  # type: ignore[no-untyped-def]
    """The tuned MSCCL-IR per size against MSCCL++ plans (the tuned IR lowered, and the library's plans)."""
    from collsynth.tune.backend import backend_table, tuned_backends
    from collsynth.tune.report import table

    choices, refused = tuned_backends(run, evaluator, runtimes)
    if as_json:
        click.echo(json.dumps({**run.to_dict(), "backends": [c.to_dict() for c in choices],
                               "plan_lowering_refused": refused}, indent=1))
        return
    click.echo(table(run))
    click.echo(f"# runtime per size ({', '.join(runtimes)}): MSCCL-IR as tuned above vs MSCCL++ plans (the tuned IR "
               "lowered, and the library's), each plan checked by the plan interpreter")
    click.echo(backend_table(choices))
    for line in refused:
        click.echo(f"  (no plan: {line})", err=True)


COMMANDS = (tune,)
