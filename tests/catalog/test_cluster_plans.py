"""The cluster-scale plans in plans/cluster/: they parse (always) and expand (slow: library programs at
128-1024 ranks take minutes to build)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collsynth.catalog.expand import expand_plan
from collsynth.catalog.plan import load_plan

PLANS = sorted((Path(__file__).resolve().parents[2] / "plans" / "cluster").glob("*.toml"))


def test_cluster_plans_parse() -> None:
    assert len(PLANS) == 4
    for path in PLANS:
        plan = load_plan(path)
        assert plan.targets, path


@pytest.mark.slow
@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_cluster_plans_expand(path: Path) -> None:
    assert expand_plan(load_plan(path))
