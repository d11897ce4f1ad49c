"""The cluster-scale synthesizer kinds of a plan (greedy, trees, hierarchical): parsed, expanded and run
through `sources.synthesize` into verified algorithms with the common result account."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from collsynth.catalog import PlanError, expand_plan, load_plan
from collsynth.catalog.sources import synthesize
from collsynth.schedule import verify

PLAN = """
sizes = ["1KB", "1MB"]
[[synthesizers]]
kind = "greedy"
size = "1MB"
[[synthesizers]]
kind = "trees"
[[synthesizers]]
name = "hier"
kind = "hierarchical"
size = "64MB"
sources = "ring,direct"
[[targets]]
topology = "torus:3x3"
collectives = ["allgather"]
synthesizers = ["greedy", "trees"]
library = false
[[targets]]
topology = "2xndv4"
collectives = ["allreduce", "alltoall"]
synthesizers = ["hier"]
library = false
"""


def test_cluster_kinds_give_verified_algorithms(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(textwrap.dedent(PLAN))
    items = expand_plan(load_plan(path))
    assert sorted((i.source, i.collective.name) for i in items) == [
        ("greedy", "allgather"), ("hierarchical", "allreduce"), ("hierarchical", "alltoall"), ("trees", "allgather")]
    for item in items:
        found = synthesize(item)
        assert found.algorithms
        for algorithm in found.algorithms:
            verify(algorithm)
        assert found.provenance["synthesizer"] == item.source
        assert found.provenance["seconds"] >= 0 and "stages" in found.provenance
        if item.source == "hierarchical":
            assert {a.provenance["node_source"] for a in found.algorithms} <= {"ring", "direct"}
            assert len(found.algorithms) >= 2


def test_bad_cluster_settings_are_one_line(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text(textwrap.dedent("""
        [[synthesizers]]
        kind = "hierarchical"
        sources = 3
        [[targets]]
        topology = "2xndv4"
        collectives = ["allreduce"]
        """))
    with pytest.raises(PlanError, match="sources"):
        load_plan(path)
    path.write_text(textwrap.dedent("""
        [[synthesizers]]
        kind = "greedy"
        size = "lots"
        [[targets]]
        topology = "ring:4"
        collectives = ["allgather"]
        """))
    with pytest.raises(PlanError, match="size"):
        load_plan(path)


def test_hierarchical_entries_are_coalesced_and_tuned(tmp_path: Path) -> None:
    from collsynth.catalog.pipeline import run_item
    from collsynth.compiler import compile_program
    from collsynth.language.lower import lower_to_program

    path = tmp_path / "plan.toml"
    path.write_text(textwrap.dedent("""
        sizes = ["1KB", "1MB"]
        [[synthesizers]]
        kind = "hierarchical"
        sources = "direct"
        [[targets]]
        topology = "2xndv4"
        collectives = ["allreduce"]
        library = false
        """))
    [item] = expand_plan(load_plan(path))
    [algorithm] = synthesize(item).algorithms
    per_chunk = compile_program(lower_to_program(algorithm)).num_steps
    result = run_item(item)
    assert result.ok and result.entries
    for entry in result.entries:
        assert entry.passed, entry.message
        # the node AllGather forwards each block that the rail phase assembled as one message, not per chunk
        assert entry.ir_stats["steps"] < per_chunk and not entry.variant.inplace
        records = entry.provenance["tuned"]
        assert isinstance(records, list) and {r["requested_bytes"] for r in records} == {1 << 10, 1 << 20}
