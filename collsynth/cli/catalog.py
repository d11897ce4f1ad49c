"""`collsynth catalog build|list|show|best|export`: the IR catalog on the command line (thin over
collsynth.catalog)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import click

from collsynth.cli.params import OutputPath
from collsynth.core.units import format_size, parse_size

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

DEFAULT_DB = "catalog.sqlite"
_db_option = click.option("--db", "db_path", default=DEFAULT_DB, show_default=True,
                          type=click.Path(dir_okay=False, path_type=Path), help="the catalog database (SQLite)")


@click.group("catalog")
def catalog() -> None:
    """Build, query and export a catalog of verified, simulated MSCCL-IR algorithms."""


@catalog.command("build")
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False, path_type=Path))
@_db_option
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(min=1),
              help="work items run in parallel processes")
@click.option("--retry-failed", is_flag=True, help="run again items that failed or have failed entries")
@click.option("--dry-run", is_flag=True, help="list the work items and whether they are done, run nothing")
@click.option("--cluster", metavar="tcp://HOST:PORT|local:N", default=None,
              help="run the items on Dask: a running `dask scheduler`, or a LocalCluster of N processes "
                   "(pip install 'collsynth[dask]'); --jobs is then ignored")
@click.option("--no-wait", is_flag=True, help="leave items other live builders hold to them (exit 1 if any) "
                                              "instead of waiting for them")
@click.option("--target", type=click.Choice(("msccl-executor", "rccl", "msccl-legacy", "none")), default=None,
              help="compile every entry for this runtime: split to its loader limits, or the entry fails naming "
                   "the limit (default: no runtime's limits, as before)")
def build(plan_path: Path, db_path: Path, jobs: int, retry_failed: bool, dry_run: bool, cluster: str | None,
          no_wait: bool, target: str | None) -> None:
    """Run PLAN (TOML): synthesize -> lower -> compile -> verify -> simulate every entry into the catalog.

    Re-running skips finished items; Ctrl-C keeps what finished; several builders may share one --db.
    Exit status: 0 done; 1 items left to other builders (--no-wait); 2 bad input, an unusable cluster or a
    lost Dask scheduler (finished items stay recorded: run again to resume); 130 interrupted."""
    from collsynth.catalog import Catalog, build_catalog, expand_plan, load_plan
    from collsynth.catalog.pipeline import with_target

    plan = load_plan(plan_path)
    if dry_run:
        items = with_target(expand_plan(plan), target)
        done: set[str] = set()
        if db_path.exists():
            with Catalog(db_path) as db:
                done = db.finished_keys()
        for item in items:
            click.echo(f"{'done   ' if item.key in done else 'pending'}  {item.key[:10]}  {item.label}  "
                       f"[{', '.join(str(v) for v in item.variants)}]")
        click.echo(f"{len(items)} items, {sum(item.key in done for item in items)} done", err=True)
        return
    with _progress() as progress:
        summary = build_catalog(plan, db_path, jobs=jobs, cluster=cluster, retry_failed=retry_failed,
                                on_event=progress, wait_for_others=not no_wait, target=target)
    click.echo(str(summary))
    if summary.claimed_elsewhere:
        click.echo(f"incomplete: {summary.claimed_elsewhere} items are left to other builders still working on "
                   "them; run the build again when they finish", err=True)
        sys.exit(1)


class _progress:
    """A rich progress bar on stderr (only on a terminal) fed by build events; plain lines for failures."""

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.task: TaskID | None = None
        self.total = 0

    def __enter__(self) -> _progress:
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("catalog", total=None)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()

    def __call__(self, event) -> None:  # type: ignore[no-untyped-def]
        if event.kind == "start" and self.bar is not None and self.task is not None:
            self.total += 1
            self.bar.update(self.task, total=self.total, description=f"running {event.item.label}")
        elif event.kind == "done":
            if self.bar is not None and self.task is not None:
                self.bar.advance(self.task)
            result = event.result
            failed = [e for e in result.entries if not e.passed]
            if not result.ok or failed:
                lines = [f"FAILED {event.item.label}: {result.message}"] if not result.ok else []
                lines += [f"FAILED {event.item.label} {e.name} {e.variant} at {e.stage}: {e.message}" for e in failed]
                for line in lines:
                    (self.bar.console.print(line, markup=False, highlight=False) if self.bar is not None
                     else click.echo(line, err=True))


@catalog.command("list")
@_db_option
@click.option("-t", "--topology", help="only this topology (its name in the catalog)")
@click.option("-c", "--collective", help="only this collective")
@click.option("--failed", is_flag=True, help="only failed entries and items (with why)")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def list_entries(db_path: Path, topology: str | None, collective: str | None, failed: bool, as_json: bool) -> None:
    """List catalog entries: id, name, topology, collective, shape, compile options, status."""
    from collsynth.catalog import Catalog
    from collsynth.collectives import canonical_name

    with Catalog(db_path) as db:
        entries = db.entries(topology=topology, collective=canonical_name(collective) if collective else None,
                             status="failed" if failed else None)
        failed_items = [item for item in db.items() if item.status == "failed"] if failed else []
    if as_json:
        click.echo(json.dumps([_entry_json(e) for e in entries], indent=1))
        return
    rows = [(e.id[:10], e.topology, e.collective, e.name, e.shape or "-", str(e.variant), e.status,
             "" if e.ok else f"{e.stage}: {e.message}") for e in entries]
    _table(("id", "topology", "collective", "name", "shape", "compile", "status", "why"), rows)
    for item in failed_items:
        click.echo(f"item {item.key[:10]}  {item.label}  failed: {item.message}")
    click.echo(f"{len(entries)} entries", err=True)


@catalog.command("show")
@click.argument("entry_id", metavar="ID")
@_db_option
@click.option("--xml", "show_xml", is_flag=True, help="print the entry's MSCCL-IR XML instead")
def show(entry_id: str, db_path: Path, show_xml: bool) -> None:
    """Show one entry (ID: a prefix of its id from `catalog list`): provenance, compile options, XML file,
    verification, predicted time per size."""
    from collsynth.catalog import Catalog, xml_relpath

    with Catalog(db_path) as db:
        entry = db.entry(entry_id)
        if show_xml:
            click.echo(db.xml_text(entry), nl=False)
            return
        points = db.times(entry.id)
        click.echo(f"entry      {entry.id}")
        click.echo(f"name       {entry.name}  ({entry.source})")
        click.echo(f"target     {entry.collective} on {entry.topology} ({entry.ranks} ranks, fingerprint "
                   f"{entry.fingerprint})")
        if entry.shape:
            click.echo(f"shape      {entry.shape}")
        click.echo(f"compile    {entry.variant}  {json.dumps(entry.ir_stats, sort_keys=True)}")
        click.echo(f"status     {entry.status}" + ("" if entry.ok else f" at {entry.stage}") + f": {entry.message}")
        if entry.xml_sha256:
            click.echo(f"xml        {db.root / xml_relpath(entry.xml_sha256)}")
        click.echo(f"provenance {json.dumps(entry.provenance, sort_keys=True)}")
    if points:
        _table(("size", "count", "type", "time (us)", "algbw (GB/s)", "busbw (GB/s)"),
               [(format_size(p.size_bytes), str(p.count), p.dtype, f"{p.time_us:.2f}", f"{p.algbw_GBps:.2f}",
                 f"{p.busbw_GBps:.2f}") for p in points])


@catalog.command("best")
@click.argument("topology_spec", metavar="TOPO")
@click.argument("collective", metavar="COLL")
@click.argument("size", metavar="SIZE")
@_db_option
@click.option("-d", "--dtype", default="float32", show_default=True, help="element type of SIZE's count")
@click.option("--inplace/--out-of-place", "inplace", default=None, help="only in-place / out-of-place entries")
@click.option("-n", "--top", default=5, show_default=True, type=click.IntRange(min=1), help="how many to rank")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@click.option("--mscclpp", "with_plans", is_flag=True,
              help="also the entries lowered to MSCCL++ plans and the library's plans: MSCCL-IR or plan at SIZE")
def best(topology_spec: str, collective: str, size: str, db_path: Path, dtype: str, inplace: bool | None, top: int,
         as_json: bool, with_plans: bool) -> None:
    """The fastest verified entry for TOPO, COLL at SIZE (nccl-tests size, e.g. 1MB), with the runners-up."""
    from collsynth.catalog import Catalog, rank_entries

    with Catalog(db_path) as db:
        ranked = rank_entries(db, topology_spec, collective, parse_size(size), dtype=dtype, inplace=inplace)
        if with_plans:  # with --json the choice goes to stderr, so stdout stays one JSON document
            _best_backend(db, topology_spec, collective, parse_size(size), dtype, to_stderr=as_json)
    from collsynth.catalog.query import with_tuned_times
    from collsynth.catalog.select import tuned_at, tuned_ranges

    ranked, how = with_tuned_times(ranked)  # re-ranked by tuned times first, then cut: a tuned entry may rise
    ranked, how = ranked[:top], how[:top]
    if as_json:
        click.echo(json.dumps([{**_entry_json(r.entry), "size_bytes": r.size_bytes, "time_us": r.time_us,
                                "busbw_GBps": r.busbw_GBps, "simulated_now": r.simulated, "compiled_as": c,
                                "tuned": tuned_at(r.entry.provenance, r.size_bytes)} for r, c in zip(ranked, how,
                                                                                                     strict=True)],
                              indent=1))
        return
    winner = ranked[0]
    click.echo(f"best: {winner.entry.name} [{winner.entry.id[:10]}] {winner.time_us:.2f} us, busbw "
               f"{winner.busbw_GBps:.2f} GB/s at {format_size(winner.size_bytes)} ({how[0]})")
    rows = [(str(i + 1), r.entry.id[:10], r.entry.name, c, f"{r.time_us:.2f}",
             f"{r.busbw_GBps:.2f}", f"{r.time_us / winner.time_us:.2f}x") for i, (r, c) in enumerate(zip(ranked, how,
                                                                                                       strict=True))]
    _table(("#", "id", "name", "compile", "time (us)", "busbw (GB/s)", "vs best"), rows)
    if any(r.simulated for r in ranked):
        click.echo(f"({format_size(winner.size_bytes)} is not on the stored grid: simulated now)", err=True)
    tuned = [(t, r) for t, r in ((tuned_at(r.entry.provenance, r.size_bytes), r) for r in ranked) if t is not None]
    if tuned:
        record, r = min(tuned, key=lambda item: item[0]["time_us"])
        ranges = tuned_ranges(r.entry.provenance)
        click.echo(f"tuned: {r.entry.name} {record['time_us']:.2f} us at {format_size(record['size_bytes'])} "
                   f"(collsynth.tune); its configuration per size range:")
        for span in ranges:
            click.echo(f"  {format_size(span.first_size)}..{format_size(span.last_size)}: {span.label()}")


@catalog.command("export")
@_db_option
@click.option("--msccl", "directory", default=None, type=OutputPath(file_okay=False, path_type=Path),
              help="write the MSCCL/RCCL algorithm directories, loader configs and report here")
@click.option("--mscclpp", "mscclpp_dir", default=None, type=OutputPath(file_okay=False, path_type=Path),
              help="write, per -t topology, the MSCCL++ plans (catalog entries lowered, library plans) that win "
                   "each size range")
@click.option("-t", "--topology", "topologies", multiple=True, help="only these topologies (repeatable)")
@click.option("-c", "--collective", "collectives", multiple=True, help="only these collectives (repeatable)")
@click.option("-d", "--dtype", default=None, help="which simulated dtype decides (when the catalog has several)")
@click.option("--force", is_flag=True, help="replace DIR if it exists")
@click.option("--target", type=click.Choice(("msccl-executor", "rccl", "msccl-legacy")), default="msccl-executor",
              show_default=True, help="the runtime that loads the export: its limits, spellings, size rule and cap")
def export(db_path: Path, directory: Path | None, mscclpp_dir: Path | None, topologies: tuple[str, ...],
           collectives: tuple[str, ...], dtype: str | None, force: bool, target: str) -> None:
    """Per (topology, collective) the winning algorithm per size range, minBytes/maxBytes at the simulated
    crossovers, as an MSCCL/RCCL-loadable directory with its loader config, plus a Markdown report and
    busbw plots of which algorithm wins where."""
    from collsynth.catalog import Catalog, plan_export, write_export

    if directory is None and mscclpp_dir is None:
        raise click.UsageError("give --msccl DIR (MSCCL-IR export) and/or --mscclpp DIR (MSCCL++ plans)")
    if mscclpp_dir is not None:
        _export_mscclpp(mscclpp_dir, topologies, db_path, collectives)
    if directory is None:
        return
    with Catalog(db_path) as db:
        groups = plan_export(db, topologies=topologies, collectives=collectives, dtype=dtype, target=target)
        summary = write_export(db, groups, directory, force=force, target=target)
    click.echo(str(summary))


def _export_mscclpp(directory: Path, topologies: tuple[str, ...], db_path: Path, collectives: tuple[str, ...],
                    ) -> None:
    from collsynth.catalog import Catalog
    from collsynth.catalog.export_mscclpp import export_mscclpp
    from collsynth.core.errors import CollsynthError
    from collsynth.topologies.io import resolve_topology

    if not topologies:
        raise CollsynthError("--mscclpp needs the topologies to write plans for: add -t NAME (e.g. -t h100_nvswitch)")
    if not Path(db_path).exists():  # no catalog: the MSCCL++ library's plans alone
        paths = export_mscclpp([resolve_topology(t) for t in topologies], directory, collectives=collectives)
    else:
        with Catalog(db_path) as db:
            paths = export_mscclpp([resolve_topology(t) for t in topologies], directory, catalog=db,
                                   collectives=collectives)
    click.echo(f"wrote {len(paths)} MSCCL++ execution plans (each passed the schema check and the plan interpreter) "
               f"to {directory}")


def _best_backend(db, topology_spec: str, collective: str, size: int, dtype: str,  # type: ignore[no-untyped-def]
                  to_stderr: bool = False) -> None:
    from collsynth.catalog.export_mscclpp import catalog_backends

    for group in catalog_backends(db, topology_spec, collective, [size], dtype):
        for c in group.choices:
            ir = f"{c.best_ir[0]} {c.best_ir[1]:.2f} us" if c.best_ir else "none"
            plan = f"{c.best_plan[0]} {c.best_plan[1]:.2f} us" if c.best_plan else "none"
            click.echo(f"{'in-place' if group.inplace else 'out-of-place'} at {format_size(c.size_bytes)}: "
                       f"{'MSCCL-IR' if c.backend == 'ir' else 'MSCCL++ plan'} wins (best IR: {ir}; best plan: {plan})",
                       err=to_stderr)


def _entry_json(entry) -> dict:  # type: ignore[no-untyped-def]
    return {"id": entry.id, "name": entry.name, "topology": entry.topology, "fingerprint": entry.fingerprint,
            "collective": entry.collective, "ranks": entry.ranks, "source": entry.source, "chunks": entry.chunks,
            "steps": entry.steps, "rounds": entry.rounds, "compile": entry.variant.to_dict(), "status": entry.status,
            "stage": entry.stage, "message": entry.message, "xml_sha256": entry.xml_sha256,
            "provenance": entry.provenance, "ir": entry.ir_stats}


def _table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    """Plain aligned columns (easy to grep and pipe)."""
    widths = [max([len(h)] + [len(row[i]) for row in rows]) for i, h in enumerate(header)]
    click.echo("  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)).rstrip())
    for row in rows:
        click.echo("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())


COMMANDS = (catalog,)
