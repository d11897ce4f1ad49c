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


def test_stages_are_chosen_by_instance_size() -> None:
    from collsynth.synth.cluster.auto import plan_stages

    assert plan_stages(builtin("2xndv4"), make_collective("allreduce", 16)) == ("hierarchical", "greedy")
    assert plan_stages(builtin("16xndv4"), make_collective("alltoall", 128)) == ("hierarchical",)
    assert plan_stages(builtin("ring:6"), make_collective("allgather", 6)) == ("greedy", "exact", "trees")
    assert plan_stages(builtin("ring:6"), make_collective("alltoall", 6)) == ("greedy", "exact")
    assert plan_stages(builtin("torus:4x4"), make_collective("allreduce", 16)) == ("greedy", "trees")
    assert plan_stages(builtin("2xndv2"), make_collective("allreduce", 16)) == ("greedy", "trees")  # shared NICs


def test_anytime_reports_each_improvement_and_keeps_them_all() -> None:
    seen: list[float] = []
    result = auto(builtin("ring:6"), make_collective("allgather", 6), 1 << 20, time_limit=60,
                  on_found=lambda label, algorithm, time_us: seen.append(time_us))
    assert seen and seen == sorted(seen, reverse=True) and len(set(seen)) == len(seen)
    assert result.algorithms[0].provenance["model_time_us"] == seen[-1]
    assert [a.provenance["model_time_us"] for a in result.algorithms] == sorted(
        a.provenance["model_time_us"] for a in result.algorithms)
    for algorithm in result.algorithms:
        verify(algorithm)
    assert {s.name for s in result.stages} >= {"greedy"}


def test_exact_runs_on_small_instances_and_hierarchical_on_nodes() -> None:
    result = auto(builtin("line:4"), make_collective("allgather", 4), 1 << 10, time_limit=60)
    assert any(s.name == "exact" for s in result.stages)
    nodes = auto(builtin("2xndv4"), make_collective("alltoall", 16), 1 << 20, time_limit=60)
    assert nodes.stages[0].name == "hierarchical"
    assert any(a.provenance.get("synthesizer") == "hierarchical" for a in nodes.algorithms)
