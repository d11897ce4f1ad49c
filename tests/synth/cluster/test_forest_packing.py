"""The exact tree packing: max-flow against networkx, the optimal rate against a brute force over all rank sets,
and the packing itself: spanning arborescences within capacity at exactly that rate, certified by `trees`."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.encodings.cut_bounds import MIB
from collsynth.schedule import verify
from collsynth.synth.cluster.flow import FlowNetwork
from collsynth.synth.cluster.forest import _link_capacities, exact_packing, optimal_rate
from collsynth.synth.cluster.trees import trees
from collsynth.topologies import Topology, builtin
from collsynth.topologies.cluster import relinked
from collsynth.topologies.model import Link


def _random_topology(seed: int, n: int) -> Topology:
    rng = random.Random(seed)
    pairs = {(u, (u + 1) % n) for u in range(n)}  # strongly connected
    pairs |= {(u, v) for u in range(n) for v in range(n) if u != v and rng.random() < 0.35}
    betas = (10.0, 20.0, 40.0)
    return Topology(f"random{seed}", n, tuple(Link(u, v, beta_us_per_mb=rng.choice(betas)) for u, v in sorted(pairs)))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 9))
def test_max_flow_matches_networkx(seed: int, n: int) -> None:
    rng = random.Random(seed)
    net, graph = FlowNetwork(n), nx.DiGraph()
    graph.add_nodes_from(range(n))
    for u, v in itertools.permutations(range(n), 2):
        if rng.random() < 0.4:
            cap = rng.randint(1, 9)
            net.add_arc(u, v, cap)
            graph.add_edge(u, v, capacity=cap)
    s, t = rng.sample(range(n), 2)
    expected = nx.maximum_flow_value(graph, s, t)
    value, residual = net.max_flow(s, t)
    assert value == expected
    side = set(net.sink_side(s, residual))  # a minimum cut: the arcs into the sink side carry exactly the flow
    assert t in side and s not in side
    assert sum(d["capacity"] for u, v, d in graph.edges(data=True) if v in side and u not in side) == expected
    limited, _ = net.max_flow(s, t, limit=max(0, expected - 1))
    assert limited == max(0, expected - 1)


def _brute_force_rate(n: int, caps: dict[tuple[int, int], int]) -> Fraction:
    best = None
    for size in range(1, n):
        for members in itertools.combinations(range(n), size):
            inside = set(members)
            into = sum(c for (a, b), c in caps.items() if b in inside and a not in inside)
            ratio = Fraction(into, n - size)
            best = ratio if best is None else min(best, ratio)
    assert best is not None
    return best


def _check_packing(topo: Topology) -> None:
    packing = exact_packing(topo)
    n, caps = topo.num_ranks, _link_capacities(topo)
    assert packing.rate == _brute_force_rate(n, caps)
    used: dict[tuple[int, int], int] = {}
    for root, weighted in packing.trees.items():
        assert sum(mu for mu, _ in weighted) == packing.per_root
        for mu, tree in weighted:
            assert set(tree) == set(range(n)) - {root}
            for child in tree:  # every rank hangs from the root
                seen, node = set(), child
                while node != root:
                    assert node not in seen and topo.has_link(tree[node], node)
                    seen.add(node)
                    node = tree[node]
            for child, parent in tree.items():
                used[(parent, child)] = used.get((parent, child), 0) + mu
    scale = packing.rate.denominator
    assert all(load <= caps[link] * scale for link, load in used.items())


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 7))
def test_exact_packing_reaches_the_brute_force_rate(seed: int, n: int) -> None:
    _check_packing(_random_topology(seed, n))


@pytest.mark.parametrize("name", ["mesh2d:3x3", "mesh2d:3x4", "hypercube:3", "torus:3x3", "line:5"])
def test_exact_packing_on_library_topologies(name: str) -> None:
    topo = builtin(name)
    if topo.num_ranks <= 9:
        _check_packing(topo)
    rate, _ = optimal_rate(topo.num_ranks, _link_capacities(topo))
    assert rate > 0


@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce"])
def test_mesh_packing_is_certified_optimal(name: str) -> None:
    """mesh2d:4x4 goes through the flow packing (not a symmetric one) and meets the cut bound exactly."""
    topo = relinked(builtin("mesh2d:4x4"), 0.5, 50.0)
    result = trees(topo, make_collective(name, 16), 16 * MIB, chunks_per_tree=1)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    assert algorithm.provenance["packing"].startswith("exact packing by flows")
    assert str(result.status) == "optimal"
    assert algorithm.provenance["packing_time_us"] == pytest.approx(algorithm.provenance["cut_bound_us"])


def test_a_topology_that_is_not_strongly_connected_is_refused() -> None:
    from collsynth.synth.cluster.timexp import GreedyError

    one_way = Topology("oneway3", 3, (Link(0, 1), Link(1, 2)))
    with pytest.raises(GreedyError, match="not strongly connected"):
        exact_packing(one_way)


def test_many_trees_per_root_round_the_rate_down() -> None:
    topo = _random_topology(7, 6)
    full = exact_packing(topo)
    capped = exact_packing(topo, max_per_root=1)
    assert capped.per_root == 1 and capped.rate <= full.rate == full.optimal == capped.optimal
    assert all(sum(mu for mu, _ in w) == 1 for w in capped.trees.values())


@pytest.mark.parametrize("name", ["torus:3x4", "ring:6", "dgx1"])
def test_other_switchless_topologies_are_certified(name: str) -> None:
    topo = builtin(name)
    result = trees(topo, make_collective("allgather", topo.num_ranks), 16 * MIB, chunks_per_tree=1)
    assert result.algorithm is not None
    assert str(result.status) == "optimal"
    assert result.algorithm.provenance["packing"].startswith("exact packing by flows")
