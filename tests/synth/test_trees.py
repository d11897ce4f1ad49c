"""Tree packing: exact translation-invariant packings certified against the cut bound, verified pipelined
schedules, and honest (uncertified) results where the packing misses the bound."""

from __future__ import annotations

import pytest

from collsynth.collectives import make_collective
from collsynth.encodings.cut_bounds import MIB, cut_bound_us
from collsynth.schedule import verify
from collsynth.synth.cluster.timexp import GreedyError
from collsynth.synth.cluster.trees import pack, trees
from collsynth.topologies import builtin
from collsynth.topologies.cluster import relinked
from collsynth.topologies.model import Link, Switch, Topology


@pytest.mark.parametrize("topology", ["torus:3x3", "torus:4x4", "hypercube:3", "hypercube:4", "torus:3x3x3"])
def test_symmetric_packing_spans_and_balances(topology: str) -> None:
    topo = builtin(topology)
    packing = pack(topo)
    n = topo.num_ranks
    for root, weighted in packing.trees.items():
        assert sum(w for w, _ in weighted) == pytest.approx(1.0)
        for _, tree in weighted:
            assert set(tree) == set(range(n)) - {root}
            assert all(topo.has_link(p, c) for c, p in tree.items())
            for child in tree:  # every rank reaches the root
                seen, node = set(), child
                while node != root:
                    assert node not in seen
                    seen.add(node)
                    node = tree[node]
    loads = set(round(x, 9) for x in packing.link_load().values())
    assert loads == {round((n - 1) / len(topo.in_neighbors[0]), 9)}


@pytest.mark.parametrize("topology", ["torus:4x4", "hypercube:4"])
@pytest.mark.parametrize("name", ["allgather", "reducescatter", "allreduce", "broadcast"])
def test_certified_and_verified(topology: str, name: str) -> None:
    topo = relinked(builtin(topology), 0.5, 50.0)
    result = trees(topo, make_collective(name, topo.num_ranks, root=0 if name == "broadcast" else None), 64 * MIB,
                   chunks_per_tree=1)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    assert algorithm.provenance["certified_optimal"]
    assert str(result.status) == "optimal"
    # the packing's unit time equals the cut bound (less one alpha)
    bound = cut_bound_us(topo, make_collective("allgather", topo.num_ranks), 64 * MIB).time_us - 0.5
    assert algorithm.provenance["packing_time_us"] == pytest.approx(bound)


def _odd_switch() -> Topology:
    # a budget over two links that are not all pairs of its senders and receivers: not a switch fabric
    links = tuple(Link(u, v) for u in range(4) for v in range(4) if u != v)
    return Topology("oddswitch4", 4, links, (Switch("pair", frozenset({(0, 1), (2, 3)}), 1),))


@pytest.mark.parametrize("topology", ["mesh2d:3x4", "fattree:4", "oddswitch"])
def test_packing_reports_its_gap_honestly(topology: str) -> None:
    """mesh2d:3x4 takes the exact flow packing and fattree:4 the exact packing after splitting off its switches
    (both certified); a budget that is not a switch fabric takes multiplicative weights, certified only if
    its packing time meets the bound."""
    topo = _odd_switch() if topology == "oddswitch" else builtin(topology)
    result = trees(topo, make_collective("allgather", topo.num_ranks), 16 * MIB, chunks_per_tree=1)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    provenance = algorithm.provenance
    assert provenance["packing_time_us"] >= provenance["cut_bound_us"] * (1 - 1e-9)
    assert provenance["certified_optimal"] == (provenance["packing_time_us"] <= provenance["cut_bound_us"] * (1 + 1e-9))
    if topology == "oddswitch":
        assert provenance["packing"].startswith("multiplicative-weights")
    else:
        assert provenance["certified_optimal"] and provenance["packing"].startswith("exact packing by flows")


def test_unsupported_collective_is_refused() -> None:
    with pytest.raises(GreedyError, match="supported"):
        trees(builtin("torus:3x3"), make_collective("alltoall", 9))
