"""`auto`: one budget, stage reports, and a status that is OPTIMAL only at the cut bound."""

from __future__ import annotations

from collsynth.collectives import make_collective
from collsynth.schedule import verify
from collsynth.synth.cluster.auto import auto
from collsynth.topologies import builtin


def test_auto_reports_stages_and_keeps_the_best() -> None:
    topo = builtin("torus:4x4")
    result = auto(topo, make_collective("allgather", 16), 1 << 26, time_limit=30)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    assert result.stages and result.stages[0].name == "greedy"
    best = min(s.objective for s in result.stages if s.objective is not None)
    assert algorithm.provenance["makespan_us"] == best
    assert result.bound is not None and result.bound <= best
    assert (str(result.status) == "optimal") == (best <= result.bound * (1 + 1e-9))


def test_auto_stops_at_the_bound() -> None:
    topo = builtin("fully_connected:4")  # one step over direct links: the greedy meets the ingress bound
    result = auto(topo, make_collective("allgather", 4), 1 << 20, time_limit=30)
    assert str(result.status) == "optimal"
    assert any("at the cut bound" in s.outcome for s in result.stages)
