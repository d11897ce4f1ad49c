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


def test_export_and_best_use_the_tuned_configuration_and_new_sizes_are_tuned(tmp_path: Path, cli_runner) -> None:
    """Winners per size are chosen on tuned times; the exported XML of a tuned winner is the tuned
    configuration's (it passes the interpreter, its protocol is the tuned one); `catalog best` ranks by the
    tuned time; a rebuild with more sizes tunes the new sizes too."""
    import json

    from collsynth.catalog import plan_export, write_export
    from collsynth.catalog.select import TUNED_SEP, entry_of, tuned_record
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.runtime import execute

    plan = write_plan(tmp_path, PLAN)
    db = tmp_path / "c.sqlite"
    with Catalog(db, create=True) as catalog:
        run_items(catalog, expand_plan(plan), jobs=1)
        (group,) = plan_export(catalog)
        tuned_wins = [w for w in group.winners if TUNED_SEP in w.winner]
        assert tuned_wins, "tuning beats the default Simple/i1 compile somewhere on this grid"
        for w in group.winners:  # every winner is the fastest of own-variant and tuned times at that size
            own = [p.time_us for e in group.candidates for p in catalog.times(e.id) if p.size_bytes == w.size_bytes]
            tuned = [r["time_us"] for e in group.candidates
                     if (r := tuned_record(e.provenance, w.size_bytes)) is not None]
            assert w.time_us == min(own + tuned)
        summary = write_export(catalog, [group], tmp_path / "out")
    manifest = json.loads((tmp_path / "out" / "fully_connected_4" / "manifest.json").read_text())
    for algo, size_range in zip(manifest["algorithms"], group.ranges, strict=True):
        ir = read_xml((tmp_path / "out" / "fully_connected_4" / algo["file"]).read_text())
        assert execute(ir, "cpu").passed
        if TUNED_SEP in size_range.winner:
            record = tuned_record(group.entry(size_range.winner).provenance, size_range.first_size)
            assert record is not None and algo["compile"] == f"tuned {record['config_key']}"
            assert ir.proto == record["config"]["protocol"] and "-tuned-" in ir.name
    assert summary.files

    at = tuned_wins[0].size_bytes
    result = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allgather", str(at), "--db", str(db),
                                      "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert rows[0]["time_us"] == tuned_wins[0].time_us and rows[0]["compiled_as"].startswith("tuned ")
    assert rows[0]["id"] == entry_of(tuned_wins[0].winner)
    for w in tuned_wins:  # --top cuts the ranking after tuned times re-rank it, so the top row is the winner
        result = cli_runner.invoke(main, ["catalog", "best", "fully_connected:4", "allgather", str(w.size_bytes),
                                          "--db", str(db), "--json", "--top", "1"])
        assert result.exit_code == 0, result.output
        top = json.loads(result.output)
        assert len(top) == 1 and top[0]["id"] == entry_of(w.winner) and top[0]["time_us"] == w.time_us

    more = write_plan(tmp_path, PLAN.replace('sizes = "1KB:1MB"', 'sizes = "1KB:16MB"'))
    with Catalog(db) as catalog:
        run_items(catalog, expand_plan(more), jobs=1)
        for e in (e for e in catalog.entries() if e.ok):
            sizes = [r["size_bytes"] for r in e.provenance["tuned"]]
            assert len(sizes) == 4 and sizes == sorted(sizes)  # 1KB, 16KB, 256KB and now 4MB
            assert e.provenance["tuned"][-1]["xml_sha256"]
            assert "tuned_xml" not in e.provenance  # the XML texts live in the store, by hash
