"""A gateway AllToAll composition is in the catalog twice: lowered block per message (`lower_composition`)
and one message per GPU and node pair (`lower_gateway`, entry `<name>-gateway`); the per-size choice
takes the gateway lowering at small sizes and the composition's at large ones, where the simulator says
so, and a rebuild with a new size tunes both with their own lowering."""

from __future__ import annotations

import json
from pathlib import Path

from catalog_helpers import write_plan

from collsynth.catalog import Catalog, expand_plan, rank_entries, run_items
from collsynth.catalog.pipeline import GATEWAY_LOWERING, LOWERING, RAIL_GATHER_LOWERING
from collsynth.catalog.query import with_tuned_times
from collsynth.cli import main

PLAN = """
sizes = ["1KB", "1GB"]
[[synthesizers]]
name = "hier"
kind = "hierarchical"
sources = "direct"
[[targets]]
topology = "2xndv4"
collectives = ["alltoall"]
synthesizers = ["hier"]
library = false
"""


def _gateway_ranking(db: Path, size: int) -> list[str]:
    """The gateway plan's entries, fastest first at `size`, as `catalog best` ranks them (tuned times)."""
    with Catalog(db) as catalog:
        ranked, _ = with_tuned_times(rank_entries(catalog, "2xndv4", "alltoall", size))
    return [r.entry.name for r in ranked if r.entry.provenance.get("plan") == "gateway"]


def test_gateway_plans_have_both_lowerings_and_the_choice_follows_the_size(tmp_path: Path, cli_runner) -> None:
    db = tmp_path / "c.sqlite"
    with Catalog(db, create=True) as catalog:
        run_items(catalog, expand_plan(write_plan(tmp_path, PLAN)), jobs=1)
        entries = [e for e in catalog.entries() if e.ok]
    names = [e.name for e in entries]
    assert len(names) == len(set(names))
    gateway = [e for e in entries if e.provenance.get("plan") == "gateway"]
    lowered = {e.name: e.provenance.get(LOWERING) for e in gateway}
    composed = [name for name, how in lowered.items() if how is None]
    assert composed and {f"{name}-{GATEWAY_LOWERING}" for name in composed} == {
        name for name, how in lowered.items() if how == GATEWAY_LOWERING}
    node_rail = {e.name: e.provenance.get(LOWERING) for e in entries if e.provenance.get("plan") == "node-rail"}
    assert sorted(node_rail.values(), key=str) == [None, RAIL_GATHER_LOWERING]  # and its two-step-like twin
    # 2xndv4 (simulated, tuned): gateway lowering 3.3 vs 10.8 us at 1 KB; 224,031 vs 216,218 us at 1 GB
    assert _gateway_ranking(db, 1 << 10)[0].endswith(f"-{GATEWAY_LOWERING}")
    assert not _gateway_ranking(db, 1 << 30)[0].endswith(f"-{GATEWAY_LOWERING}")

    result = cli_runner.invoke(main, ["catalog", "best", "2xndv4", "alltoall", "1KB", "--db", str(db), "--json",
                                      "--top", "20"])
    assert result.exit_code == 0, result.output
    assert {row["name"] for row in json.loads(result.output)} == set(names)

    more = write_plan(tmp_path, PLAN.replace('["1KB", "1GB"]', '["1KB", "16MB", "1GB"]'))
    with Catalog(db) as catalog:  # resumed: the new size is simulated and tuned, each entry in its own lowering
        run_items(catalog, expand_plan(more), jobs=1)
        again = {e.name: e for e in catalog.entries() if e.ok}
    assert set(again) == set(names)
    for name in lowered:
        sizes = [r["requested_bytes"] for r in again[name].provenance["tuned"]]
        assert sizes == [1 << 10, 16 << 20, 1 << 30]
    # the gateway lowering's messages are per GPU and node pair: fewer IR steps than the composition's
    for name in composed:
        assert again[f"{name}-{GATEWAY_LOWERING}"].ir_stats["steps"] != again[name].ir_stats["steps"]
