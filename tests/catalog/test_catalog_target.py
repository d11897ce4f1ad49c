"""`catalog build --target`: entries compiled for a runtime's loader limits (split to fit), keyed apart from
untargeted ones, and exported XML that the target's doctor accepts."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from catalog_helpers import write_plan

from collsynth.catalog import Catalog, build_catalog, expand_plan, plan_export, write_export
from collsynth.catalog.pipeline import with_target
from collsynth.compiler.split import target_violation
from collsynth.core.targets import TargetError
from collsynth.emit.msccl_xml import read_xml

# A 34-rank ring AllReduce runs 66 steps per threadblock: beyond the 64 that msccl-executor and RCCL load.
LONG_RING = """
name = "long-ring"
sizes = ["64KB", "1MB"]
[[targets]]
topology = "ring:34"
collectives = ["allreduce"]
library = ["ring_allreduce"]
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Callable[[str | None, Path], Path]:
    """LONG_RING's catalog built at most once per target (None: untargeted) for the whole module, as the tests
    built it; `built(target, into)` copies it (database and XML store) to the directory `into` and returns the
    database there, so a test that writes to its copy changes no other test's (a build takes seconds)."""
    base = tmp_path_factory.mktemp("long-ring")
    plan = write_plan(base, LONG_RING)
    made: dict[str, Path] = {}

    def copy(target: str | None, into: Path) -> Path:
        name = target or "untargeted"
        if name not in made:
            (base / name).mkdir()
            build_catalog(plan, base / name / "catalog.db", target=target)
            made[name] = base / name
        shutil.copytree(made[name], into)
        return into / "catalog.db"

    return copy


def _entries(db: Path) -> list:
    with Catalog(db) as catalog:
        return [(entry, read_xml(catalog.xml_text(entry))) for entry in catalog.entries(status="ok")]


def test_with_target_keys_items_apart(tmp_path: Path) -> None:
    items = expand_plan(write_plan(tmp_path, LONG_RING))
    assert [i.key for i in with_target(items, None)] == [i.key for i in items]  # no target: keys as before
    targeted = with_target(items, "rccl")
    assert {i.key for i in targeted}.isdisjoint({i.key for i in items})
    assert [i.param("target") for i in targeted] == ["rccl"]
    assert [i.key for i in with_target(targeted, "rccl")] == [i.key for i in targeted]  # idempotent
    with pytest.raises(TargetError, match="unknown target 'nccl'"):
        with_target(items, "nccl")


@pytest.mark.parametrize("target", ["rccl", "msccl-executor"])
def test_build_for_target_splits_and_exports_what_doctor_accepts(tmp_path: Path, cli_runner, built, target: str
                                                                 ) -> None:
    from collsynth.cli import main

    untargeted, targeted = built(None, tmp_path / "plain"), built(target, tmp_path / "targeted")
    [(plain_entry, plain_ir)] = _entries(untargeted)
    assert "at most 64 steps per thread block" in (target_violation(plain_ir, target) or "")
    [(entry, ir)] = _entries(targeted)
    assert entry.provenance["target"] == target and entry.ir_stats["target"] == target
    assert target_violation(ir, target) is None
    assert ir.nchannels > plain_ir.nchannels  # split over more channels
    out = tmp_path / "export"
    result = cli_runner.invoke(main, ["catalog", "export", "--db", str(targeted), "--msccl", str(out),
                                      "--target", target])
    assert result.exit_code == 0, result.output
    [topo_dir] = [d for d in out.iterdir() if (d / "msccl-algorithms").is_dir()]
    doctor = cli_runner.invoke(main, ["doctor", str(topo_dir), "--target", target])
    assert doctor.exit_code == 0, doctor.output


def test_build_cli_refuses_an_unknown_target(tmp_path: Path, cli_runner) -> None:
    from collsynth.cli import main

    write_plan(tmp_path, LONG_RING)
    result = cli_runner.invoke(main, ["catalog", "build", str(tmp_path / "plan.toml"), "--db",
                                      str(tmp_path / "x.db"), "--target", "nccl"])
    assert result.exit_code == 2
    assert not (tmp_path / "x.db").exists()


def test_dry_run_lists_targeted_items(tmp_path: Path, cli_runner) -> None:
    from collsynth.cli import main

    write_plan(tmp_path, LONG_RING)
    db = tmp_path / "t.db"
    plain = cli_runner.invoke(main, ["catalog", "build", str(tmp_path / "plan.toml"), "--db", str(db), "--dry-run"])
    targeted = cli_runner.invoke(main, ["catalog", "build", str(tmp_path / "plan.toml"), "--db", str(db),
                                        "--dry-run", "--target", "rccl"])
    assert plain.exit_code == targeted.exit_code == 0
    assert plain.output.split()[1] != targeted.output.split()[1]  # a different item key


def test_export_plans_only_entries_the_target_loads(tmp_path: Path, built) -> None:
    db = built(None, tmp_path / "plain")
    with Catalog(db) as catalog:
        groups = plan_export(catalog, target="msccl-legacy")  # 256 steps: the unsplit ring loads
        assert groups and not groups[0].refused
        write_export(catalog, groups, tmp_path / "legacy", target="msccl-legacy")


def test_tuning_compiles_for_the_target(tmp_path: Path, built) -> None:
    # the untargeted tuning picks the unsplit 66-step ring, which rccl refuses; for the target it is split
    from collsynth.catalog.store import load_xml_text

    db = built("rccl", tmp_path / "t")
    with Catalog(db) as catalog:
        [entry] = catalog.entries(status="ok")
        records = entry.provenance["tuned"]
        assert isinstance(records, list) and {r["requested_bytes"] for r in records} == {64 << 10, 1 << 20}
        for record in records:
            assert target_violation(read_xml(load_xml_text(catalog.root, record["xml_sha256"])), "rccl") is None


def test_cluster_entries_tune_on_a_smaller_grid() -> None:
    from collsynth.catalog.pipeline import tuning_grid
    from collsynth.topologies import resolve_topology
    from collsynth.tune.entry import CATALOG_GRID

    assert tuning_grid(resolve_topology("dgx1")) == CATALOG_GRID
    grid = tuning_grid(resolve_topology("16xndv4"))
    assert grid.instances == (1,) and set(grid.fusion) == set(grid.pair_threadblocks) == {True, False}
