"""Winners per size, crossovers, and the MSCCL/RCCL export directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalog_helpers import write_plan
from hypothesis import given
from hypothesis import strategies as st

from collsynth.catalog import (
    Catalog,
    CatalogError,
    Winner,
    build_catalog,
    crossover,
    merge_ranges,
    plan_export,
    size_ranges,
    winners_per_size,
    write_export,
)
from collsynth.catalog.select import size_granule
from collsynth.emit.msccl_xml import read_xml

EXPORT_PLAN = """
name = "export"
sizes = "1KB:64MB"
size_factor = 4
[[targets]]
topology = "dgx1"
collectives = ["allgather", "allreduce"]
[[targets]]
topology = "fully_connected:4"
collectives = ["allreduce"]
"""


def test_winners_and_runner_up() -> None:
    times = {"a": {1: 1.0, 2: 5.0, 4: 9.0}, "b": {1: 2.0, 2: 4.0, 4: 8.0}, "c": {4: 20.0}}
    winners = winners_per_size(times)
    assert [(w.size_bytes, w.winner, w.runner_up) for w in winners] == [(1, "a", "b"), (2, "b", "a"), (4, "b", "a")]
    assert winners[0].margin == pytest.approx(1.0)
    assert merge_ranges(winners) == [("a", 1, 1), ("b", 2, 4)]
    assert winners_per_size({"x": {8: 3.0}})[0].margin is None


def test_ties_are_broken_by_name() -> None:
    assert winners_per_size({"b": {1: 1.0}, "a": {1: 1.0}})[0].winner == "a"


@given(left_alpha=st.floats(0, 50), extra_alpha=st.floats(0.5, 100), left_beta=st.floats(1e-3, 1.0),
       beta_ratio=st.floats(0.05, 0.9), granule=st.sampled_from([1, 4, 128]))
def test_crossover_of_two_lines(left_alpha: float, extra_alpha: float, left_beta: float, beta_ratio: float,
                                granule: int) -> None:
    """Left: low latency, high cost per byte; right: the opposite; they cross once."""
    def left(x: int) -> float:
        return left_alpha + left_beta * x

    def right(x: int) -> float:
        return left_alpha + extra_alpha + left_beta * beta_ratio * x

    exact = extra_alpha / (left_beta * (1 - beta_ratio))  # where the lines meet
    lo = max(0, int(exact // 2) // granule * granule)
    hi = (int(exact * 2) // granule + 2) * granule
    if not (left(lo) <= right(lo) and right(hi) < left(hi)):
        return
    x = crossover(left, right, lo, hi, granule)
    assert x % granule == 0 and lo < x <= hi
    assert right(x) < left(x)
    assert x - granule <= lo or right(x - granule) >= left(x - granule)


def test_size_ranges_tile_all_sizes() -> None:
    winners = [Winner(1024, "a", 1.0), Winner(4096, "a", 2.0), Winner(16384, "b", 3.0), Winner(65536, "c", 4.0)]
    ranges = size_ranges(winners, lambda left, right, lo, hi: (lo + hi) // 2)
    assert [(r.winner, r.min_bytes, r.max_bytes) for r in ranges] == [
        ("a", 0, 10239), ("b", 10240, 40959), ("c", 40960, 0)]
    for size in (0, 1, 10239, 10240, 40959, 40960, 1 << 40):
        assert sum(r.contains(size) for r in ranges) == 1
    single = size_ranges([Winner(1, "only", 1.0)], lambda *a: 0)
    assert [(r.min_bytes, r.max_bytes) for r in single] == [(0, 0)]


def test_size_granule_follows_nccl_tests() -> None:
    assert size_granule("allgather", 8, 4) == 128
    assert size_granule("alltoall", 8, 2) == 128
    assert size_granule("allreduce", 8, 2) == 2


@pytest.fixture(scope="module")
def export_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp_path = tmp_path_factory.mktemp("export")
    db_path = tmp_path / "c.sqlite"
    build_catalog(write_plan(tmp_path, EXPORT_PLAN), db_path)
    return db_path


def test_export_directory(export_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "msccl"
    with Catalog(export_db) as catalog:
        groups = plan_export(catalog)
        summary = write_export(catalog, groups, target)
    assert {(g.topology.name, g.collective) for g in groups} == {("dgx1", "allgather"), ("dgx1", "allreduce"),
                                                                  ("fully_connected:4", "allreduce")}
    assert (target / "report.md").is_file() and summary.directory == target
    for topo_dir in ("dgx1", "fully_connected_4"):
        algo_dir = target / topo_dir / "msccl-algorithms"
        files = sorted(algo_dir.iterdir())
        assert files and all(f.suffix == ".xml" for f in files)  # the loaders parse every file there
        manifest = json.loads((target / topo_dir / "manifest.json").read_text())
        env = (target / topo_dir / "msccl.env").read_text()
        # msccl-executor reads the directory; it ignores NCCL_ALGO and MSCCL_XML_FILES
        assert 'MSCCL_ALGO_DIR="$_here/msccl-algorithms"' in env and "MSCCL_XML_FILES=" not in env
        assert "NCCL_ALGO" not in env.replace("NCCL_ALGO plays no part", "")
        by_coll: dict[str, list[tuple[int, int]]] = {}
        for algo in manifest["algorithms"]:
            ir = read_xml(target / topo_dir / algo["file"])
            assert (ir.min_bytes, ir.max_bytes) == (algo["minBytes"], algo["maxBytes"])
            assert ir.collective == algo["coll"] and not ir.inplace
            by_coll.setdefault(algo["collective"], []).append((algo["minBytes"], algo["maxBytes"]))
        for ranges in by_coll.values():
            ranges.sort()
            assert ranges[0][0] == 0 and ranges[-1][1] == 0
            for (lo, hi), (next_lo, _) in zip(ranges, ranges[1:], strict=False):
                assert lo <= hi and next_lo == hi + 1  # contiguous, no overlap
    for group in groups:
        assert (target / "plots" / f"{group.slug}.png").stat().st_size > 1000
        for w in group.winners:  # the range holding each grid size is the one its winner serves
            holder = [r for r in group.ranges if r.contains(w.size_bytes)]
            assert len(holder) == 1 and holder[0].winner == w.winner
    report = (target / "report.md").read_text()
    assert "## AllGather on dgx1" in report and "source <topology>/msccl.env" in report
    from collsynth.core.files import current_umask

    mask = current_umask()  # shareable like any file the user writes, not private like a temp file
    assert target.stat().st_mode & 0o777 == 0o777 & ~mask
    for path in (target / "report.md", *target.glob("*/msccl-algorithms/*.xml")):
        assert path.stat().st_mode & 0o777 == 0o666 & ~mask


def test_range_boundaries_sit_at_the_simulated_crossover(export_db: Path) -> None:
    """At each boundary the next range's winner is strictly faster, one size step below it is not (checked
    by simulating both XMLs again), and every grid size is served by its fastest candidate."""
    from collsynth.catalog.export import _candidate_ir
    from collsynth.sim import simulate

    with Catalog(export_db) as catalog:
        groups = plan_export(catalog)
        irs = {key: _candidate_ir(catalog, key, g.candidates) for g in groups for key in g.points}
    boundaries = 0
    for group in groups:
        granule = size_granule(group.collective, group.topology.num_ranks, 4)
        for left, right in zip(group.ranges, group.ranges[1:], strict=False):
            x = right.min_bytes
            assert left.last_size < x <= right.first_size and left.max_bytes == x - 1

            def time(entry_id: str, size: int, g=group) -> float:
                return simulate(irs[entry_id], g.topology, [size]).rows[0].time_us

            assert time(right.winner, x) < time(left.winner, x)
            if x - granule > left.last_size:
                assert time(right.winner, x - granule) >= time(left.winner, x - granule)
            boundaries += 1
        for w in group.winners:
            fastest = min(p.time_us for points in group.points.values() for p in points
                          if p.size_bytes == w.size_bytes)
            assert w.time_us == fastest
    assert boundaries >= 1, "the fixture should have at least one crossover to check"


def test_export_filters_force_and_errors(export_db: Path, tmp_path: Path) -> None:
    target = tmp_path / "out"
    with Catalog(export_db) as catalog:
        write_export(catalog, plan_export(catalog, collectives=["allgather"]), target)
        with pytest.raises(CatalogError, match="not empty"):
            write_export(catalog, plan_export(catalog), target)
        write_export(catalog, plan_export(catalog, topologies=["fully_connected:4"]), target, force=True)
        with pytest.raises(CatalogError, match="no verified entries matching"):
            plan_export(catalog, collectives=["alltoall"])
        with pytest.raises(CatalogError, match="no times simulated for dtype"):
            plan_export(catalog, dtype="half")
    assert sorted(p.name for p in target.iterdir()) == ["fully_connected_4", "plots", "report.md"]
    assert not list(tmp_path.glob(".out.*"))  # no staging directory left behind


def test_legacy_export_caps_algorithms_and_writes_its_size_rule(export_db: Path, tmp_path: Path) -> None:
    from collsynth.core.targets import INT64_MAX, MSCCL_LEGACY

    target = tmp_path / "legacy"
    with Catalog(export_db) as catalog:
        groups = plan_export(catalog, target="msccl-legacy")
        summary = write_export(catalog, groups, target, target="msccl-legacy")
    ranges = sum(len(g.ranges) for g in groups)
    written = sorted(target.glob("*/msccl-algorithms/*.xml"))
    assert len(written) + len(summary.left_out) == ranges
    for topo_dir in target.iterdir():
        if not (topo_dir / "manifest.json").is_file():
            continue
        files = sorted((topo_dir / "msccl-algorithms").iterdir())
        assert len(files) <= MSCCL_LEGACY.max_algorithms
        env = (topo_dir / "msccl.env").read_text()
        assert "MSCCL_XML_FILES=" in env and "NCCL_ALGO=MSCCL" in env and "MSCCL_ALGO_DIR" not in env
        manifest = json.loads((topo_dir / "manifest.json").read_text())
        for algo in manifest["algorithms"]:
            assert Path(algo["file"]).name in env
            ir = read_xml(topo_dir / algo["file"])
            assert ir.min_bytes == algo["minBytes"]
            # legacy selects minBytes <= size < maxBytes: our inclusive upper end + 1, open ends as INT64_MAX
            assert ir.max_bytes == (INT64_MAX if algo["maxBytes"] == 0 else algo["maxBytes"] + 1)
    if summary.left_out:
        assert "left out" in str(summary)


@pytest.mark.parametrize("runtime", ["msccl-executor", "rccl", "msccl-legacy"])
def test_every_exported_xml_passes_doctor(export_db: Path, tmp_path: Path, cli_runner, runtime: str) -> None:
    from collsynth.cli import main

    target = tmp_path / runtime
    with Catalog(export_db) as catalog:
        write_export(catalog, plan_export(catalog, target=runtime), target, target=runtime)
    topo_dirs = [d for d in target.iterdir() if (d / "msccl-algorithms").is_dir()]
    assert topo_dirs
    for topo_dir in topo_dirs:
        result = cli_runner.invoke(main, ["doctor", str(topo_dir), "--target", runtime])
        assert result.exit_code == 0, result.output
