"""Hierarchical composition: every plan verified on identical nodes, node-crossing traffic on rails only,
candidates distinct and ordered by model time; phase sources; refusals."""

from __future__ import annotations

import pytest

from collsynth.collectives import make_collective
from collsynth.schedule import verify
from collsynth.synth.cluster.hier_phases import min_rounds, phase_schedule
from collsynth.synth.cluster.hierarchical import SUPPORTED, groups_of, hierarchical, model_time_us, sub_topology
from collsynth.synth.cluster.timexp import GreedyError
from collsynth.topologies import builtin


@pytest.mark.parametrize("name", SUPPORTED)
def test_every_collective_composes_on_two_ndv4_nodes(name: str) -> None:
    topo = builtin("2xndv4")
    result = hierarchical(topo, make_collective(name, 16, 2), 1 << 24, sources=["direct", "ring"])
    assert result.algorithms
    for algorithm in result.algorithms:
        verify(algorithm)
        assert algorithm.collective.name == name
        crossings = {(send.src, send.dst) for _, send in algorithm.sends()
                     if topo.node_of(send.src) != topo.node_of(send.dst)}
        if algorithm.provenance["plan"] == "gateway":  # one gateway pair per ordered node pair
            assert len({(topo.node_of(a), topo.node_of(b)) for a, b in crossings}) == len(crossings) == 2
        else:  # only the rail phases cross nodes, each GPU on its own rail
            assert all(a % 8 == b % 8 for a, b in crossings)
        for step in algorithm.steps:  # the rounds are the fewest that fit links and switch budgets
            assert step.rounds == min_rounds(topo, step.sends)
    times = [model_time_us(a, 1 << 24) for a in result.algorithms]
    assert times == sorted(times)
    assert len({a.steps for a in result.algorithms}) == len(result.algorithms)


def test_four_nodes_give_distinct_rail_schedules() -> None:
    topo = builtin("4xndv4")
    result = hierarchical(topo, make_collective("allreduce", 32), 1 << 20, sources=["ring", "direct", "doubling"])
    rails = {(a.provenance["node_source"], a.provenance["rail_source"]) for a in result.algorithms}
    assert ("ring", "ring") in rails and ("ring", "doubling") in rails and ("direct", "direct") in rails
    steps = {a.provenance["rail_source"]: a.num_steps for a in result.algorithms
             if a.provenance["node_source"] == "ring"}
    # node ring RS + AG: 7 + 7 steps; rail AllReduce: ring 3 + 3, doubling 2 + 2, direct 1 + 1
    assert steps == {"ring": 20, "doubling": 18, "direct": 16}


@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce", "alltoall"])
@pytest.mark.parametrize("source", ["direct", "ring", "doubling", "greedy"])
def test_phase_sources_are_verified_or_decline(name: str, source: str) -> None:
    node = sub_topology(builtin("2xndv4"), groups_of(builtin("2xndv4"))[0], "node")
    algorithm = phase_schedule(source, node, make_collective(name, 8, 1))
    if algorithm is None:
        assert name == "alltoall" and source in ("ring", "doubling")
    else:
        verify(algorithm)


def test_doubling_needs_a_power_of_two_and_ring_needs_its_links() -> None:
    assert phase_schedule("doubling", builtin("fully_connected:6"), make_collective("allgather", 6)) is None
    assert phase_schedule("direct", builtin("ring:5"), make_collective("allgather", 5)) is None
    ring = phase_schedule("ring", builtin("ring:5"), make_collective("allgather", 5))
    assert ring is not None and ring.num_steps == 4


def test_composition_lowers_compiles_and_beats_the_library_at_64mb() -> None:
    from collsynth.algorithms.registry import build
    from collsynth.compiler.pipeline import compile_program
    from collsynth.language.lower import lower_to_program
    from collsynth.sim.simulate import simulate

    topo = builtin("2xndv4")
    result = hierarchical(topo, make_collective("allreduce", 16), 1 << 26, sources=["ring"])
    ours = compile_program(lower_to_program(result.algorithms[0], inplace=True))
    library = compile_program(build("hierarchical_allreduce", topo, num_nodes=2, inplace=True))
    size = 1 << 26
    assert simulate(ours, topo, [size]).rows[0].time_us < simulate(library, topo, [size]).rows[0].time_us


def test_refusals() -> None:
    with pytest.raises(GreedyError, match="share NICs"):
        hierarchical(builtin("2xndv2"), make_collective("allreduce", 16))
    with pytest.raises(GreedyError, match="one node"):
        hierarchical(builtin("ndv4"), make_collective("allreduce", 8))
    with pytest.raises(GreedyError, match="not 'broadcast'"):
        hierarchical(builtin("2xndv4"), make_collective("broadcast", 16))
    with pytest.raises(GreedyError, match="unknown phase source"):
        hierarchical(builtin("2xndv4"), make_collective("allreduce", 16), sources=["magic"])


def test_a_past_deadline_keeps_the_first_candidate_only() -> None:
    result = hierarchical(builtin("4xndv4"), make_collective("allreduce", 32), 1 << 20, sources=["ring", "direct"],
                          deadline=0.0)
    assert len(result.algorithms) == 1
    assert sum("budget spent" in s.outcome for s in result.stages) == 3


def test_gateway_alltoall_spreads_node_pairs_over_gpus() -> None:
    topo = builtin("4xndv4")
    result = hierarchical(topo, make_collective("alltoall", 32, 2), 1 << 10, sources=["direct"])
    [gateway] = [a for a in result.algorithms if a.provenance["plan"] == "gateway"
                 and a.provenance["rail_source"] == "round-robin"]
    verify(gateway)
    assert gateway.num_steps == 3
    [bulk] = [step for step in gateway.steps if any(topo.node_of(s.src) != topo.node_of(s.dst) for s in step.sends)]
    pairs = {(s.src, s.dst) for s in bulk.sends}
    assert len(pairs) == 4 * 3  # one message per ordered node pair, from a different GPU for each remote node
    assert len({src for src, _ in pairs}) == 4 * 3 and all(topo.node_of(a) != topo.node_of(b) for a, b in pairs)
    assert len(bulk.sends) == 4 * 3 * 8 * 8 * 2  # each carries every (source, destination) block of the pair


def test_rail_gateways_keep_each_bulk_on_one_rail_and_spread_the_bulks_evenly() -> None:
    topo = builtin("4xndv4")
    result = hierarchical(topo, make_collective("alltoall", 32), 1 << 10, sources=["direct"])
    [gateway] = [a for a in result.algorithms if a.provenance.get("rail_source") == "rail"]
    verify(gateway)
    bulk = {(s.src, s.dst) for s in gateway.steps[1].sends}
    assert len(bulk) == 4 * 3 and all(topo.node_of(a) != topo.node_of(b) for a, b in bulk)
    assert all(a % 8 == b % 8 for a, b in bulk)  # sender and receiver have one GPU index: one rail
    # pair (m, m + h) uses GPU h - 1: 3 hops on 8 GPUs, so no GPU sends or receives two bulks
    assert len({a for a, _ in bulk}) == len({b for _, b in bulk}) == 4 * 3


def test_gateway_alltoall_beats_the_three_step_program_at_1kb() -> None:
    from collsynth.algorithms.hier_lower import lower_composition
    from collsynth.algorithms.registry import build
    from collsynth.compiler.pipeline import compile_program
    from collsynth.sim.simulate import simulate

    topo = builtin("4xndv4")
    result = hierarchical(topo, make_collective("alltoall", 32), 1 << 10, sources=["direct"])
    [gateway] = [a for a in result.algorithms if a.provenance["plan"] == "gateway"
                 and a.provenance["rail_source"] == "round-robin"]
    ours = compile_program(lower_composition(gateway, merge="stage"), "msccl-executor")
    library = compile_program(build("three_step_alltoall", topo, num_nodes=4), "msccl-executor")
    assert simulate(ours, topo, [1 << 10]).rows[0].time_us < simulate(library, topo, [1 << 10]).rows[0].time_us
