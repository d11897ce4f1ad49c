"""The catalog tunes every entry it builds: tuned configuration per size in the entry's provenance, checked
by the interpreter, and `catalog best` shows it per size range."""

from __future__ import annotations

from pathlib import Path

from catalog_helpers import write_plan

from collsynth.catalog import Catalog, expand_plan, run_items
from collsynth.catalog.select import tuned_at, tuned_ranges
from collsynth.cli import main

PLAN = """
name = "tuned"
sizes = "1KB:1MB"
size_factor = 16
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather"]
"""


def test_catalog_entries_carry_their_tuned_configuration(tmp_path: Path, cli_runner) -> None:
    plan = write_plan(tmp_path, PLAN)
    db = tmp_path / "c.sqlite"
    with Catalog(db, create=True) as catalog:
        run_items(catalog, expand_plan(plan), jobs=1)
        entries = [e for e in catalog.entries() if e.ok]
        assert entries
        for e in entries:
            records = e.provenance["tuned"]
            assert [r["size_bytes"] for r in records] == sorted(r["size_bytes"] for r in records)
            assert len(records) == 3  # 1KB, 16KB, 256KB
            stored = {p.size_bytes: p.time_us for p in catalog.times(e.id)}
            for r in records:  # the tuned time is the best of a grid that holds the entry's own variant
                assert r["time_us"] <= stored[r["size_bytes"]] * (1 + 1e-9)
                assert r["config"]["algorithm"] == e.name
            ranges = tuned_ranges(e.provenance)
            assert ranges[0].first_size == records[0]["size_bytes"]
            assert ranges[-1].last_size == records[-1]["size_bytes"]
            assert tuned_at(e.provenance, 1 << 20) == records[-1]
    result = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allgather", "16KB", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "tuned:" in result.output and "configuration per size range" in result.output
