"""MSCCLang's Topology methods answer with MSCCLang's meaning (msccl/topologies/topology.py): num_nodes() is the
rank count, nodes() the ranks, link(src, dst) a bandwidth number, plus sources/destinations/bandwidth_constraints
and the Topology(name, links[dst][src], switches) constructor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.topologies import Topology, TopologyError, dgx1, distributed, fully_connected, hub_and_spoke, ring
from collsynth.topologies.model import Link


def test_rank_count_and_ranks_are_methods() -> None:
    topo = dgx1()
    assert topo.num_nodes() == 8 and list(topo.nodes()) == list(range(8))
    two = distributed.distributed_fully_connected(ring(4), 2, 1)
    # MSCCLang's num_nodes() counts ranks; the machine count is num_machines
    assert two.num_nodes() == 8 and two.num_machines == 2


def test_link_is_the_bandwidth_number() -> None:
    topo = dgx1()
    assert topo.link(0, 1) == 2 and topo.link(0, 2) == 1 and topo.link(0, 5) == 0
    assert isinstance(topo.link_between(0, 1), Link) and topo.link_between(0, 5) is None
    assert not ring(4).link(0, 2) and ring(4).link(0, 1)  # programs test `topo.link(a, b) or a == b`


def test_sources_destinations_and_constraints_of_a_hub() -> None:
    topo = hub_and_spoke(3)
    assert list(topo.sources(0)) == [1, 2] and list(topo.destinations(2)) == [0, 1]
    constraints = list(topo.bandwidth_constraints())
    per_link = [c for c in constraints if len(c[0]) == 1 and len(c[1]) == 1 and "→" in c[3]]
    assert len(per_link) == 6 and ([1], [0], 1, "1→0") in per_link
    switches = constraints[len(per_link):]
    assert len(switches) == len(topo.switches) and all(bw >= 1 for _, _, bw, _ in switches)
    for srcs, dsts, bw, name in topo.switches:  # a switch unpacks as MSCCLang's tuple
        assert isinstance(name, str) and bw == 1 and srcs and dsts


def test_constructor_takes_mscclang_matrix_and_switches() -> None:
    # links[dst][src]: 1 -> 0 carries 2, 0 -> 1 and 2 -> 1 carry 1, 1 -> 2 carries 1
    topo = Topology("mine", [[0, 2, 0], [1, 0, 1], [0, 1, 0]], [([0], [1, 2], 1, "out0")])
    assert topo.num_ranks == 3 and topo.num_nodes() == 3
    assert topo.link(1, 0) == 2 and topo.link(0, 1) == 1 and topo.link(0, 2) == 0
    assert [tuple(s) for s in topo.switches] == [([0], [1], 1, "out0")]  # only pairs that have a link
    with pytest.raises(TopologyError, match="strictly positive"):
        Topology("bad", [[0, 1], [1, 0]], [([0], [1], 0, "dead")])
    with pytest.raises(TopologyError, match="square"):
        Topology("bad", [[0, 1], [1]])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6).flatmap(lambda n: st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                                                   min_size=n, max_size=n)))
def test_matrix_round_trip(matrix: list[list[int]]) -> None:
    """Every MSCCLang method reads back the matrix it was built from (diagonal ignored, as self-links are none)."""
    topo = Topology("m", matrix)
    n = len(matrix)
    for src in range(n):
        for dst in range(n):
            want = matrix[dst][src] if src != dst else 0
            assert topo.link(src, dst) == want
        assert list(topo.destinations(src)) == [d for d in range(n) if d != src and matrix[d][src]]
        assert list(topo.sources(src)) == [s for s in range(n) if s != src and matrix[src][s]]
    assert sorted((c[0][0], c[1][0], c[2]) for c in topo.bandwidth_constraints()) == sorted(
        (s, d, matrix[d][s]) for s in range(n) for d in range(n) if s != d and matrix[d][s])


def test_builder_topologies_match_mscclang_counts() -> None:
    assert sum(1 for _ in fully_connected(5).bandwidth_constraints()) == 20
    assert sorted(ring(5).destinations(0)) == [1, 4]


def test_transformers_reverse_and_binarize() -> None:
    from collsynth.topologies import binarize_topology, reverse_topology

    topo = Topology("t", [[0, 3, 0], [1, 0, 2], [0, 0, 0]], [([0], [1], 1, "s")])
    back = reverse_topology(topo)
    assert back.name == "Reverset" and [tuple(s) for s in back.switches] == [([1], [0], 1, "s_reversed")]
    for src in range(3):
        for dst in range(3):
            assert back.link(src, dst) == topo.link(dst, src)
    flat = binarize_topology(dgx1())
    assert flat.name == f"Binarized{dgx1().name}"
    assert flat.switches == () and {flat.link(0, d) for d in flat.destinations(0)} == {1}
    assert list(flat.destinations(0)) == list(dgx1().destinations(0))
