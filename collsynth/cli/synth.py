"""`collsynth synth`: SCCL-style SMT synthesis (instance, least-steps, pareto); `synth milp` joins this group."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from collsynth.cli.params import CHUNKS_OPTION, ROOT_OPTION, ROUNDS_OPTION, SECONDS, STEPS_OPTION, OutputPath
from collsynth.core.errors import CollsynthError

if TYPE_CHECKING:  # the solvers' modules (numpy, networkx, z3) load when a command runs, not for --help
    from collsynth.collectives import Collective
    from collsynth.schedule import SynthesisResult
    from collsynth.topologies import Topology


class SynthCliError(CollsynthError):
    """Bad command-line input for `collsynth synth`."""


def _problem(topology_spec: str, collective_spec: str, chunks: int, root: int | None) -> tuple[Topology, Collective]:
    from collsynth.collectives import resolve_collective
    from collsynth.topologies import resolve_topology

    if chunks < 1:
        raise SynthCliError(f"--chunks must be >= 1, got {chunks}")
    topology = resolve_topology(topology_spec)
    if root is not None and not 0 <= root < topology.num_ranks:
        raise SynthCliError(f"--root {root} is not a rank of {topology.name} (0..{topology.num_ranks - 1})")
    collective = resolve_collective(collective_spec, topology.num_ranks, 1, root=root)
    return topology, collective.split(chunks)


def _positive(name: str, value: float | int | None) -> None:
    if value is not None and value <= 0:
        raise SynthCliError(f"{name} must be > 0, got {value}")


_TOPO_HELP = "TOPOLOGY is a built-in name (dgx1, ring:8, ...) or a topology JSON file (ours or a TACCL profile)."
_COLL_HELP = ("COLLECTIVE is a name, case and separators optional (allgather, AllGather, all_gather, reduce_scatter, "
              "...), or a collective JSON file.")


@click.group("synth")
def synth() -> None:
    """Synthesize collective algorithms: SCCL-style SMT (instance, least-steps, pareto) and TACCL-style MILP."""


def _common(function: Any, time_help: str = "Seconds per solver call; a time-out is reported as such, never as "
            "unsat.", time_default: float | None = 60.0) -> Any:
    function = click.option("--time-limit", type=SECONDS, default=time_default, show_default=True,
                            help=time_help)(function)
    function = click.option("--root", type=ROOT_OPTION, default=None,
                            help="Root rank of rooted collectives (default 0).")(function)
    function = click.argument("collective")(function)
    function = click.argument("topology")(function)
    return function


def _whole_run(function: Any) -> Any:
    """--time-limit for the whole run and --call-time-limit for each solver call (least-steps, pareto)."""
    function = click.option("--call-time-limit", type=SECONDS, default=60.0, show_default=True,
                            help="Seconds per solver call; a time-out is reported as such, never as unsat.")(function)
    return _common(function, "Seconds for the whole run: it then ends with what it found (default: no limit).",
                   None)


def _report_instance(result: SynthesisResult, output: str | None, as_json: bool, what: str) -> None:
    from collsynth.core.enums import Status
    from collsynth.core.files import write_atomic

    account = result.provenance
    algorithm = result.algorithm
    if as_json:
        status = Status.SAT if result.status == Status.OPTIMAL else result.status
        doc = {"status": str(status), "chunks": account.get("chunks"), "steps": account.get("steps"),
               "rounds": algorithm.rounds if algorithm is not None else account.get("max_rounds"),
               "least_rounds": bool(account.get("least_rounds")), "seconds": round(result.seconds, 3),
               "tried": [a.to_dict() for a in result.tried],
               "algorithm": algorithm.to_dict() if algorithm is not None else None}
        click.echo(json.dumps(doc, indent=1))
    if algorithm is not None:
        if output:
            write_atomic(Path(output), algorithm.to_json())
        if not as_json:
            note = " (fewest rounds for these chunks and steps)" if account.get("least_rounds") else ""
            click.echo(f"{algorithm.name}: {algorithm.num_steps} steps, {algorithm.rounds} rounds, "
                       f"R/C = {algorithm.bandwidth_cost}{note}; verified; {result.seconds:.2f} s")
            if result.status not in (Status.SAT, Status.OPTIMAL):
                click.echo(f"note: a time-out left fewer {what} undecided")
            click.echo(str(algorithm))
            if output:
                click.echo(f"wrote {output}")
        return
    if not as_json:
        limit = f" and <= {account['max_rounds']} rounds" if account.get("max_rounds") is not None else ""
        verdict = ("no algorithm exists (unsat)" if result.status == Status.UNSAT
                   else "the solver timed out (raise --time-limit)")
        steps = f"up to {account.get('steps')}" if what == "steps" else account.get("steps")
        click.echo(f"{account.get('chunks')} chunks, {steps} steps{limit}: {verdict}; "
                   f"{result.seconds:.2f} s")
    sys.exit(1)


@synth.command("instance", epilog=f"{_TOPO_HELP} {_COLL_HELP} Exit code 1 when no algorithm was found.")
@_common
@click.option("--chunks", "-c", type=CHUNKS_OPTION, required=True, help="Chunks per buffer slot (C).")
@click.option("--steps", "-s", type=STEPS_OPTION, required=True, help="Steps (S).")
@click.option("--rounds", "-r", type=ROUNDS_OPTION, default=None,
              help="At most this many rounds (R); default: the fewest.")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None, help="Write the algorithm JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def instance(topology: str, collective: str, root: int | None, time_limit: float, chunks: int, steps: int,
             rounds: int | None, output: str | None, as_json: bool) -> None:
    """An algorithm for COLLECTIVE on TOPOLOGY with C chunks in S steps (and at most R rounds)."""
    from collsynth.synth.instance import synthesize_instance

    _positive("--time-limit", time_limit)
    _positive("--steps", steps)
    _positive("--rounds", rounds)
    topo, coll = _problem(topology, collective, chunks, root)
    result = synthesize_instance(topo, coll, steps, rounds, time_limit=time_limit)
    _report_instance(result, output, as_json, "rounds")


@synth.command("least-steps", epilog=f"{_TOPO_HELP} {_COLL_HELP} Exit code 1 when no algorithm was found.")
@_whole_run
@click.option("--chunks", "-c", type=CHUNKS_OPTION, default=1, show_default=True, help="Chunks per buffer slot (C).")
@click.option("--rounds", "-r", type=ROUNDS_OPTION, default=None, help="At most this many rounds; default: any.")
@click.option("--max-steps", type=STEPS_OPTION, default=None,
              help="Give up above this many steps (default: bound + ranks).")
@click.option("-o", "--output", type=OutputPath(dir_okay=False), default=None, help="Write the algorithm JSON here.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def least_steps_command(topology: str, collective: str, root: int | None, time_limit: float | None,
                        call_time_limit: float, chunks: int, rounds: int | None, max_steps: int | None,
                        output: str | None, as_json: bool) -> None:
    """The algorithm for COLLECTIVE on TOPOLOGY with the fewest steps (then the fewest rounds)."""
    from collsynth.core.enums import Status
    from collsynth.synth.least_steps import least_steps

    _positive("--time-limit", time_limit)
    _positive("--call-time-limit", call_time_limit)
    _positive("--rounds", rounds)
    _positive("--max-steps", max_steps)
    start = time.perf_counter()
    topo, coll = _problem(topology, collective, chunks, root)
    deadline = None if time_limit is None else start + time_limit
    result = least_steps(topo, coll, rounds=rounds, time_limit=call_time_limit, max_steps=max_steps,
                         deadline=deadline)
    if result.status == Status.UNSAT and result.provenance.get("proof"):
        raise SynthCliError(str(result.provenance["proof"]))  # impossible whatever the steps: a bad request
    _report_instance(result, output, as_json, "steps")


@synth.command("pareto", epilog=f"{_TOPO_HELP} {_COLL_HELP} Points are printed (with --json: one JSON line each) "
               "and saved (--report) as they are found; the last JSON line is the whole frontier.")
@_whole_run
@click.option("--max-chunks", type=CHUNKS_OPTION, default=8, show_default=True,
              help="Stop at this many chunks if the bandwidth lower bound is not met before.")
@click.option("--jobs", "-j", type=int, default=1, show_default=True, help="Chunk counts solved in parallel processes.")
@click.option("--max-steps", type=STEPS_OPTION, default=None,
              help="Steps cap while no point is known (default: bound + ranks).")
@click.option("--report", "report_dir", type=OutputPath(file_okay=False), default=None,
              help="Write frontier.json, the algorithms, report.md and frontier.png to this directory.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines on stdout: each point, then the frontier.")
def pareto(topology: str, collective: str, root: int | None, time_limit: float | None, call_time_limit: float,
           max_chunks: int, jobs: int, max_steps: int | None, report_dir: str | None, as_json: bool) -> None:
    """The Pareto frontier of steps against rounds per chunk for COLLECTIVE on TOPOLOGY."""
    from collsynth.core.signals import keeping_finished_work
    from collsynth.synth.pareto import SweepInterrupted, pareto_frontier, sweep_document
    from collsynth.synth.report import ALGORITHMS_DIR, write_report

    _positive("--time-limit", time_limit)
    _positive("--call-time-limit", call_time_limit)
    if max_chunks < 1:
        raise SynthCliError(f"--max-chunks must be >= 1, got {max_chunks}")
    if jobs < 1:
        raise SynthCliError(f"--jobs must be >= 1, got {jobs}")
    _positive("--max-steps", max_steps)
    topo, coll = _problem(topology, collective, 1, root)
    if report_dir is not None and Path(report_dir).exists() and not Path(report_dir).is_dir():
        raise SynthCliError(f"--report {report_dir}: exists and is not a directory; give a directory path")
    progress = _Progress(enabled=not as_json and sys.stderr.isatty(), max_chunks=max_chunks)
    events = _SweepEvents(topo, coll, progress, report_dir, as_json)
    try:
        result = pareto_frontier(topo, coll, max_chunks=max_chunks, time_limit=call_time_limit, jobs=jobs,
                                 max_steps=max_steps, on_event=events, total_time_limit=time_limit)
    except SweepInterrupted as stop:
        with keeping_finished_work(stop):  # the sweep's z3 contexts go now, not through the report's cycles
            progress.stop()
            if report_dir is not None:
                write_report(stop.result, report_dir)
                click.echo(f"interrupted: {len(stop.result.points)} points kept in {report_dir}", err=True)
        raise
    finally:
        progress.stop()
    if as_json:
        click.echo(json.dumps(sweep_document(result)))
    else:
        _print_frontier(result)
    if report_dir is not None:
        write_report(result, report_dir)
        if not as_json:
            folder = Path(report_dir)
            algorithms = sorted((folder / ALGORITHMS_DIR).glob("*.json"))
            click.echo(f"wrote {folder}: report.md, frontier.png, frontier.json, {ALGORITHMS_DIR}/ "
                       f"({len(algorithms)} algorithm{'s' if len(algorithms) != 1 else ''})")


class _SweepEvents:
    """The sweep's events: progress bar, each point printed (or one JSON line) and saved as it is found."""

    def __init__(self, topology: Topology, collective: Collective, progress: _Progress, report_dir: str | None,
                 as_json: bool) -> None:
        self.topology, self.collective, self.progress = topology, collective, progress
        self.report_dir, self.as_json = report_dir, as_json
        self.points: list[Any] = []
        self.tried: list[Any] = []
        self.bounds: tuple[int, Any] = (0, 0)
        self.start = time.perf_counter()

    def __call__(self, kind: str, payload: Any) -> None:
        if kind == "bounds":
            self.bounds = (payload["steps"], payload["rounds_per_chunk"])
            self.progress.start(payload["sweeps"])
        elif kind == "attempt":
            self.tried.append(payload)
            self.progress.attempt(payload)
        elif kind == "point":
            self._point(payload)
        elif kind == "chunks":
            self.progress.advance()

    def _point(self, point: Any) -> None:
        from collsynth.synth.pareto import frontier_result
        from collsynth.synth.report import write_progress

        self.points.append(point)
        if self.as_json:
            click.echo(json.dumps({"point": {**point.to_dict(), "rounds_per_chunk": str(point.rounds_per_chunk),
                                             "seconds": round(point.seconds, 3)}}))
        else:
            self.progress.echo(f"point: C={point.chunks} S={point.steps} R={point.rounds} "
                               f"(R/C = {point.rounds_per_chunk}, {point.status})")
        if self.report_dir is not None:
            write_progress(frontier_result(self.topology, self.collective, self.bounds, tuple(self.points),
                                           tuple(self.tried), "running", time.perf_counter() - self.start),
                           self.report_dir)


def _print_frontier(result: SynthesisResult) -> None:
    from rich.console import Console
    from rich.table import Table

    from collsynth.collectives import display_name

    assert result.topology is not None and result.collective is not None
    name = display_name(result.collective.name)
    table = Table(title=f"{name} on {result.topology.name}: Pareto frontier", title_justify="left")
    for column in ("C", "S", "R", "R/C", "status", "solve s"):
        table.add_column(column, justify="right" if column not in ("status", "R/C") else "left")
    for p in result.frontier:
        table.add_row(str(p.chunks), str(p.steps), str(p.rounds), str(p.rounds_per_chunk), p.status,
                      f"{p.seconds:.2f}")
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    counts = {k: sum(1 for a in result.tried if a.result == k) for k in ("sat", "unsat", "timeout")}
    console.print(f"lower bounds: steps >= {result.steps_bound}, R/C >= {result.bound}"
                  f"{' (met)' if result.bound_met else ''}; {result.stopped}; {len(result.tried)} solver calls "
                  f"({counts['sat']} sat, {counts['unsat']} unsat, {counts['timeout']} timeout); "
                  f"{result.seconds:.1f} s")


class _Progress:
    """A rich progress bar on stderr over the chunk counts of the sweep (nothing when disabled)."""

    def __init__(self, *, enabled: bool, max_chunks: int) -> None:
        self.enabled, self.max_chunks = enabled, max_chunks
        self._bar: Any = None
        self._task: Any = None

    def start(self, sweeps: int) -> None:
        if not self.enabled or self._bar is not None:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._bar = Progress(TextColumn("[bold]sweep[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             TextColumn("{task.description}"), console=Console(stderr=True), transient=True)
        self._bar.start()
        self._task = self._bar.add_task("", total=self.max_chunks * sweeps)

    def attempt(self, attempt: Any) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=f"C={attempt.chunks} S={attempt.steps} R<={attempt.rounds}: "
                                                     f"{attempt.result}")

    def echo(self, line: str) -> None:
        """A line for the user on stderr (above the bar when one is shown)."""
        if self._bar is not None:
            self._bar.console.print(line, highlight=False)
        else:
            click.echo(line, err=True)

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.advance(self._task)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


COMMANDS = (synth,)
