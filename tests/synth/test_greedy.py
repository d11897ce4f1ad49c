"""The time-expanded greedy: verified, timed schedules of every supported collective, switch budgets kept
over time, deterministic, within a few percent of the cut bound on tori, and faithful in simulation."""

from __future__ import annotations

from collections import defaultdict

import pytest

from collsynth.collectives import make_collective
from collsynth.compiler.pipeline import compile_program
from collsynth.encodings.cut_bounds import cut_bound_us
from collsynth.language.timed import lower_timed
from collsynth.schedule import verify
from collsynth.sim.simulate import simulate
from collsynth.synth.cluster.greedy import SUPPORTED, greedy
from collsynth.synth.cluster.timexp import GreedyError
from collsynth.topologies import Link, Topology, builtin
from collsynth.topologies.cluster import relinked

ROOTED = ("broadcast", "gather", "scatter", "reduce")
SIZE = 64 << 20


def _collective(name: str, n: int, chunks: int = 1):
    return make_collective(name, n, chunks, root=0 if name in ROOTED else None)


@pytest.mark.parametrize("topology", ["torus:3x3", "hub_and_spoke:4", "2xndv2", "line:4"])
@pytest.mark.parametrize("name", SUPPORTED)
def test_every_collective_verifies_and_is_timed(topology: str, name: str) -> None:
    topo = builtin(topology)
    result = greedy(topo, _collective(name, topo.num_ranks), SIZE)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    sends = [send for _, send in algorithm.sends()]
    assert sends and all(s.start_us is not None and s.duration_us for s in sends)
    makespan = algorithm.provenance["makespan_us"]
    assert makespan == pytest.approx(max(s.start_us + s.duration_us for s in sends))
    assert makespan >= cut_bound_us(topo, algorithm.collective, SIZE).time_us - 1e-6


@pytest.mark.parametrize("topology", ["hub_and_spoke:6", "2xndv2", "fattree:4"])
def test_switch_budgets_hold_at_every_instant(topology: str) -> None:
    topo = builtin(topology)
    algorithm = greedy(topo, _collective("allgather", topo.num_ranks, 2), SIZE).algorithm
    assert algorithm is not None
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for _, send in algorithm.sends():
        for switch in topo.switches:
            if (send.src, send.dst) in switch.links:
                events[switch.name] += [(send.start_us, 1), (send.start_us + send.duration_us, -1)]
    lanes = {s.name: s.bandwidth for s in topo.switches}
    for name, changes in events.items():
        busy = 0
        for _, delta in sorted(changes, key=lambda x: (round(x[0], 6), x[1])):
            busy += delta
            assert busy <= lanes[name], name


def test_links_carry_one_transfer_at_a_time() -> None:
    topo = builtin("torus:4x4")
    algorithm = greedy(topo, _collective("alltoall", 16), SIZE).algorithm
    assert algorithm is not None
    per_link: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for _, send in algorithm.sends():
        per_link[(send.src, send.dst)].append((send.start_us, send.start_us + send.duration_us))
    for spans in per_link.values():
        spans.sort()
        assert all(b[0] >= a[1] - 1e-6 for a, b in zip(spans, spans[1:], strict=False))


def test_deterministic_for_a_seed() -> None:
    topo = builtin("torus:4x4")
    first = greedy(topo, _collective("allgather", 16), SIZE, seed=3).algorithm
    second = greedy(topo, _collective("allgather", 16), SIZE, seed=3).algorithm
    assert first is not None and second is not None
    assert first.to_dict()["steps"] == second.to_dict()["steps"]


def test_torus_allgather_close_to_ingress_bound() -> None:
    topo = relinked(builtin("torus:8x8"), 0.5, 50.0)
    coll = _collective("allgather", 64, 2)
    algorithm = greedy(topo, coll, 1 << 30).algorithm
    assert algorithm is not None
    bound = cut_bound_us(topo, coll, 1 << 30).time_us
    assert algorithm.provenance["makespan_us"] <= 1.06 * bound


def test_simulated_time_follows_the_schedule() -> None:
    topo = relinked(builtin("torus:4x4"), 0.5, 50.0)
    algorithm = greedy(topo, _collective("allgather", 16), 1 << 28).algorithm
    assert algorithm is not None
    ir = compile_program(lower_timed(algorithm))
    simulated = simulate(ir, topo, [1 << 28]).rows[0].time_us
    assert simulated <= 1.05 * algorithm.provenance["makespan_us"]


def test_unreachable_ranks_are_refused() -> None:
    links = (Link(0, 1), Link(1, 0), Link(2, 3), Link(3, 2))
    topo = Topology("two-islands", 4, links)
    with pytest.raises(GreedyError, match="unreachable"):
        greedy(topo, _collective("allgather", 4), SIZE)
