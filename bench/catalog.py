"""Catalog and regression timings: build throughput (serial and parallel), resume, export, `best`, and the
quick regression suite.

    .venv/bin/python bench/catalog.py            # everything
    .venv/bin/python bench/catalog.py --no-regress
    .venv/bin/python bench/catalog.py --dask     # a >= 200-item plan on Dask LocalCluster 1 vs 2 workers

Prints a table of wall times. The machine is shared: record figures with the load they were taken under.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

from collsynth.catalog import Catalog, build_catalog, load_plan, plan_export, rank_entries, write_export

LIBRARY_PLAN = """
name = "bench-library"
sizes = "1KB:1GB"
[[targets]]
topology = "ring:8"
collectives = ["allgather", "reducescatter", "allreduce"]
[[targets]]
topology = "fully_connected:8"
collectives = ["allgather", "reducescatter", "allreduce", "alltoall"]
[[targets]]
topology = "dgx1"
collectives = ["allgather", "reducescatter", "allreduce"]
[[targets]]
topology = "ndv2"
collectives = ["allgather", "reducescatter", "allreduce"]
[[targets]]
topology = "dgx2"
collectives = ["allgather", "reducescatter", "allreduce", "alltoall"]
[[targets]]
topology = "2xndv2"
collectives = ["allgather", "reducescatter", "allreduce"]
[[targets]]
topology = "mesh2d:4x4"
collectives = ["allgather", "reducescatter", "allreduce"]
"""


def timed(label: str, rows: list[tuple[str, str, str]], fn: Callable[[], object], detail: Callable[[object], str]
          ) -> object:
    started = time.perf_counter()
    result = fn()
    rows.append((label, f"{time.perf_counter() - started:.2f}", detail(result)))
    return result


def dask_plan() -> str:
    """A library plan of >= 200 items (rings, fully connected, meshes, the DGX/NDv2 built-ins)."""
    collectives = '["allgather", "reducescatter", "allreduce", "alltoall"]'
    names = ([f"ring:{n}" for n in range(3, 27)] + [f"fully_connected:{n}" for n in range(3, 13)]
             + [f"mesh2d:{a}x{b}" for a, b in ((2, 2), (2, 3), (2, 4), (3, 3), (3, 4), (4, 4))]
             + ["dgx1", "ndv2", "dgx2", "2xndv2"])
    targets = "".join(f'[[targets]]\ntopology = "{name}"\ncollectives = {collectives}\n' for name in names)
    return f'name = "bench-dask"\nsizes = "1KB:1MB"\nsize_factor = 4\n{targets}'


def catalog_contents(db_path: Path) -> list[tuple[object, ...]]:
    with Catalog(db_path) as catalog:
        return sorted((e.id, e.xml_sha256, tuple((p.requested_bytes, p.time_us) for p in catalog.times(e.id)))
                      for e in catalog.entries())


def bench_dask(root: Path, rows: list[tuple[str, str, str]]) -> None:
    """Local serial build, then LocalCluster with 1 and 2 workers; every build must give the same entries."""
    plan_path = root / "dask.toml"
    plan_path.write_text(dask_plan())
    plan = load_plan(plan_path)
    seconds: dict[str, float] = {}
    contents = {}
    for label, cluster in (("local --jobs 1", None), ("LocalCluster 1 worker", "local:1"),
                           ("LocalCluster 2 workers", "local:2")):
        db_dir = root / label.replace(" ", "_")
        db_dir.mkdir()
        started = time.perf_counter()
        summary = build_catalog(plan, db_dir / "c.sqlite", cluster=cluster)
        seconds[label] = time.perf_counter() - started
        contents[label] = catalog_contents(db_dir / "c.sqlite")
        rows.append((f"build {summary.items}-item plan, {label}", f"{seconds[label]:.2f}",
                     f"{summary.ran} items, {summary.entries_ok} entries, {summary.ran / seconds[label]:.2f} items/s"))
    same = len({repr(c) for c in contents.values()}) == 1
    rows.append(("speed-up LocalCluster 2 vs 1 workers",
                 f"{seconds['LocalCluster 1 worker'] / seconds['LocalCluster 2 workers']:.2f}x",
                 f"entries identical across the three builds: {same}"))
    if not same:
        raise SystemExit("the Dask builds differ from the local build")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-regress", action="store_true", help="skip the quick regression suite")
    parser.add_argument("--jobs", type=int, default=2, help="parallel jobs for the parallel build (default 2)")
    parser.add_argument("--dask", action="store_true", help="only the Dask comparison (needs collsynth[dask])")
    args = parser.parse_args()
    rows: list[tuple[str, str, str]] = []
    if args.dask:
        with tempfile.TemporaryDirectory(prefix="collsynth-bench-") as scratch:
            bench_dask(Path(scratch), rows)
        print_rows(rows)
        return
    with tempfile.TemporaryDirectory(prefix="collsynth-bench-") as scratch:
        root = Path(scratch)
        plan_path = root / "library.toml"
        plan_path.write_text(textwrap.dedent(LIBRARY_PLAN))
        plan = load_plan(plan_path)
        (root / "serial").mkdir()
        (root / "parallel").mkdir()
        serial_db, parallel_db = root / "serial" / "c.sqlite", root / "parallel" / "c.sqlite"
        timed("build library plan, --jobs 1", rows, lambda: build_catalog(plan, serial_db, jobs=1),
              lambda s: f"{s.ran} items, {s.entries_ok} entries, 31 sizes each")
        timed(f"build library plan, --jobs {args.jobs}", rows, lambda: build_catalog(plan, parallel_db, jobs=args.jobs),
              lambda s: f"{s.ran} items, {s.entries_ok} entries")
        timed("re-run (everything done)", rows, lambda: build_catalog(plan, serial_db),
              lambda s: f"{s.skipped} skipped")
        with Catalog(serial_db) as catalog:
            timed("best dgx1 allreduce 1MB (on grid)", rows,
                  lambda: rank_entries(catalog, "dgx1", "allreduce", 1 << 20), lambda r: r[0].entry.name)
            timed("best dgx1 allreduce 3MB (simulated now)", rows,
                  lambda: rank_entries(catalog, "dgx1", "allreduce", 3 << 20), lambda r: r[0].entry.name)
            groups = timed("export: winners + crossovers", rows, lambda: plan_export(catalog),
                           lambda g: f"{len(g)} groups, {sum(len(x.ranges) for x in g)} ranges")
            timed("export: write XML, configs, plots, report", rows,
                  lambda: write_export(catalog, groups, root / "export"), lambda s: f"{len(s.files)} files")
        if not args.no_regress:
            from collsynth.regress import load_baseline, load_suite, regress

            timed("regress --quick (jobs 1)", rows, lambda: regress(load_suite(True), load_baseline()),
                  lambda r: f"{len(r.entries)} entries, {'PASS' if r.passed else 'FAIL'}")
    print_rows(rows)


def print_rows(rows: list[tuple[str, str, str]]) -> None:
    load = os.getloadavg()[0]
    width = max(len(r[0]) for r in rows)
    print(f"# collsynth bench/catalog.py  (load average {load:.1f} on {os.cpu_count()} cores, shared machine)")
    print(f"{'what':<{width}}  {'seconds':>8}  detail")
    for label, seconds, detail in rows:
        print(f"{label:<{width}}  {seconds:>8}  {detail}")


if __name__ == "__main__":
    main()
