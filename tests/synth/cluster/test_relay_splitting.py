"""Switch removal by edge splitting: the relay graph of switched fabrics, the splitting keeping every rank's
connectivity, budgets never overloaded by the split links or the trees, and certified-optimal packings on
fattree and multi-node built-ins."""

from __future__ import annotations

import random
from collections import defaultdict
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.encodings.cut_bounds import MIB
from collsynth.schedule import verify
from collsynth.synth.cluster.forest import optimal_rate_graph, pack_arborescences, switched_packing
from collsynth.synth.cluster.split import EXACT_DENOMINATOR, integer_rates, relay_graph, split_relays
from collsynth.synth.cluster.trees import _chunk_order, trees
from collsynth.topologies import Topology, builtin
from collsynth.topologies.library import IB_EDR, IB_HDR, multi_node
from collsynth.topologies.model import Link, Switch


def _random_fabric(seed: int) -> Topology:
    """2-3 nodes of 2-4 GPUs (ports on a switch, or direct links of random speed), NICs shared at random."""
    rng = random.Random(seed)
    g = rng.randint(2, 4)
    pairs = [(u, v) for u in range(g) for v in range(g) if u != v]
    if rng.random() < 0.5:
        links = tuple(Link(u, v, beta_us_per_mb=10.0) for u, v in pairs)
        switches = tuple(Switch(f"port_{d}_{r}", frozenset(p for p in pairs if p[i] == r), 1, 10.0)
                         for r in range(g) for i, d in ((0, "out"), (1, "in")))
    else:
        ring = {(u, (u + 1) % g) for u in range(g)} | {((u + 1) % g, u) for u in range(g)}
        chosen = sorted(ring | {p for p in pairs if rng.random() < 0.4})
        links, switches = tuple(Link(u, v, beta_us_per_mb=rng.choice((5.0, 10.0, 20.0))) for u, v in chosen), ()
    cut = rng.randint(1, g)
    nics = (tuple(range(cut)), tuple(range(cut, g))) if cut < g else (tuple(range(g)),)
    node = Topology(f"node{seed}", g, links, switches, nics=nics)
    return multi_node(node, rng.randint(2, 3), rng.choice((IB_EDR, IB_HDR)))


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6))
def test_splitting_keeps_connectivity_and_budgets(seed: int) -> None:
    topo = _random_fabric(seed)
    graph = relay_graph(topo)
    assert graph is not None  # multi-node fabrics with complete-bipartite budgets are relay graphs
    n = topo.num_ranks
    rate, _ = optimal_rate_graph(n, graph.num_nodes, [(a, b, c) for a, b, _, c in graph.arcs])
    caps = split_relays(graph, rate)
    assert caps is not None
    budget_cap = dict(zip(range(len(topo.switches)), integer_rates(
        [s.bandwidth / s.beta_us_per_mb for s in topo.switches] + [1 / x.beta_us_per_mb for x in topo.link_list]),
        strict=False))
    # every split arc is a real link, and each budget carries at most its capacity
    assert set(caps) <= set(topo.link_map)
    for b, switch in enumerate(topo.switches):
        assert sum(caps.get(link, 0) for link in switch.links) <= budget_cap[b] * rate.denominator
    # the trees: spanning arborescences from every root, within the split capacities
    packed = pack_arborescences(n, caps, rate.numerator)
    used: dict[tuple[int, int], int] = defaultdict(int)
    for root, weighted in packed.items():
        assert sum(mu for mu, _ in weighted) == rate.numerator
        for mu, tree in weighted:
            assert set(tree) == set(range(n)) - {root}
            for child, parent in tree.items():
                used[(parent, child)] += mu
                node = parent
                for _ in range(n):  # every rank leads back to the root
                    node = tree.get(node, node)
                assert node == root
    assert all(used[link] <= caps[link] for link in used)


@pytest.mark.parametrize("name", ["fattree:4", "2xndv2", "3xndv2", "2xndv4"])
def test_switched_fabrics_are_certified_optimal(name: str) -> None:
    topo = builtin(name)
    result = trees(topo, make_collective("allgather", topo.num_ranks), 64 * MIB, chunks_per_tree=1)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    assert algorithm.provenance["packing"].startswith("exact packing by flows")
    assert str(result.status) == "optimal"
    assert algorithm.provenance["packing_time_us"] == pytest.approx(algorithm.provenance["cut_bound_us"])


def test_fattree_rate_is_the_port_bound() -> None:
    exact = switched_packing(builtin("fattree:4"))
    assert exact is not None and exact.rate == exact.optimal and exact.rate.denominator == 7  # 1/(n-1)


def test_non_fabric_budgets_are_not_relay_graphs() -> None:
    links = tuple(Link(u, v) for u in range(4) for v in range(4) if u != v)
    odd = Topology("odd4", 4, links, (Switch("pair", frozenset({(0, 1), (2, 3)}), 1),))
    assert relay_graph(odd) is None and switched_packing(odd) is None


def test_integer_rates_are_exact_or_rounded_down() -> None:
    assert integer_rates([1.0, 2.0, 0.5]) == [2, 4, 1]
    caps = integer_rates([1 / 52.5, 1 / 3.833])
    assert caps[0] == 16 and caps[1] / 16 <= 52.5 / 3.833 < (caps[1] + 1) / 16


def test_exact_rates_keep_the_ndv4_ratio() -> None:
    assert integer_rates([1 / 52.5, 1 / 3.833], EXACT_DENOMINATOR) == [3833, 52500]


def test_rounding_that_costs_the_optimum_packs_at_exact_rates() -> None:
    """2xndv4: a rank's ingress (NVSwitch port + NIC) is the bound, and NVSwitch/IB = 52500/3833 is no multiple
    of 1/16: the rounded rates would miss it, the exact ones meet it with few distinct trees."""
    topo = builtin("2xndv4")
    rounded = relay_graph(topo)
    assert rounded is not None
    rounded_rate, _ = optimal_rate_graph(16, rounded.num_nodes, [(a, b, c) for a, b, _, c in rounded.arcs])
    exact = switched_packing(topo)
    assert exact is not None and exact.weighted and exact.rate == exact.optimal
    assert rounded_rate / rounded.slowest < exact.rate / 3833 == (Fraction(52500, 3833) + 1) / 15
    assert all(sum(mu for mu, _ in w) == exact.per_root for w in exact.trees.values())
    assert sum(len(w) for w in exact.trees.values()) <= 4 * 16 < exact.per_root


def test_chunks_follow_tree_weights() -> None:
    assert _chunk_order([0.25] * 4, 8) == [0, 1, 2, 3, 0, 1, 2, 3]
    order = _chunk_order([0.6, 0.3, 0.1], 10)
    assert [order.count(t) for t in range(3)] == [6, 3, 1]
    assert order[:3] == [0, 1, 0]  # spread, not in blocks
