"""The catalog's MSCCL-IR entries lowered to MSCCL++ plans: per size IR or plan (`catalog best --mscclpp`), and
`catalog export --mscclpp` writing the winning plans (entries' and library's), each one passing the interpreter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from catalog_helpers import write_plan

from collsynth.catalog import Catalog, build_catalog
from collsynth.catalog.export_mscclpp import catalog_backends, export_mscclpp
from collsynth.runtime.plan import execute_plan
from collsynth.topologies import resolve_topology

PLAN = """
name = "mscclpp"
sizes = "1KB:1MB"
size_factor = 32
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather", "allreduce"]
"""
SIZES = [1 << 10, 1 << 15, 1 << 20]


@pytest.fixture(scope="module")
def db_path(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("mscclpp_catalog")
    path = tmp / "c.sqlite"
    build_catalog(write_plan(tmp, PLAN), path)
    return path


def test_entries_compete_as_ir_and_as_plans(db_path: Path) -> None:
    with Catalog(db_path) as catalog:
        entries = catalog.entries(collective="allreduce", status="ok")
        groups = catalog_backends(catalog, "fully_connected:4", "allreduce", SIZES)
    assert entries and groups
    lowered = [p for g in groups for p in g.plans if p.origin != "library"]
    assert {p.origin.split("@")[0] for p in lowered} == {e.name for e in entries}  # every entry became plans
    for group in groups:
        assert [c.size_bytes for c in group.choices] == SIZES
        for choice in group.choices:
            options = [t for t in (choice.best_ir, choice.best_plan) if t is not None]
            assert choice.time_us == min(t[1] for t in options)
            if choice.best_plan is not None:
                assert group.plan_times[choice.best_plan[0]][SIZES.index(choice.size_bytes)] == choice.best_plan[1]


def test_export_writes_checked_plans_that_tile_the_sizes(db_path: Path, tmp_path: Path) -> None:
    topology = resolve_topology("fully_connected:4")
    with Catalog(db_path) as catalog:
        paths = export_mscclpp([topology], tmp_path, SIZES, catalog=catalog)
    plans = [json.loads(p.read_text()) for p in paths]
    assert {p["collective"] for p in plans} == {"allgather", "allreduce"}
    assert any(not p["name"].startswith("mscclpp_") for p in plans)  # catalog entries, not only the library
    for plan in plans:
        assert execute_plan(plan).passed
    for coll, inplace in {(p["collective"], p["inplace"]) for p in plans}:
        ranges = sorted((p["min_message_size"], p["max_message_size"]) for p in plans
                        if (p["collective"], p["inplace"]) == (coll, inplace))
        assert ranges[0][0] == 0 and ranges[-1][1] == 2**64 - 1
        assert all(b[0] == a[1] + 1 for a, b in zip(ranges, ranges[1:], strict=False))


def test_cli_best_and_export(db_path: Path, tmp_path: Path, cli_runner) -> None:
    from collsynth.cli import main

    best = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allreduce", "32KB", "--db", str(db_path),
                                    "--mscclpp"])
    assert best.exit_code == 0, best.output
    assert "at 32KB:" in best.output and "wins (best IR:" in best.output
    as_json = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allreduce", "32KB", "--db",
                                       str(db_path), "--mscclpp", "--json"])
    assert as_json.exit_code == 0 and json.loads(as_json.stdout)  # the choice goes to stderr: stdout is JSON
    assert "wins (best IR:" in as_json.stderr
    out = tmp_path / "plans"
    export = cli_runner.invoke(main, ["catalog", "export", "--db", str(db_path), "--mscclpp", str(out), "-t",
                                      "fully_connected:4", "-c", "allgather"])
    assert export.exit_code == 0, export.output
    files = list((out / "fully_connected_4").glob("*.json"))
    assert files and all(json.loads(f.read_text())["collective"] == "allgather" for f in files)
