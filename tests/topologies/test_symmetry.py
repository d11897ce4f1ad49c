"""Topology symmetry: automorphisms that carry a collective to itself, orbits, reversal."""

from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.topologies import dgx1, ring, torus
from collsynth.topologies.symmetry import (
    instance_symmetries,
    is_automorphism,
    is_single_cycle,
    orbits,
    reversed_topology,
    same_links,
)


def signatures(coll):
    return list(zip(coll.pre, coll.post, strict=True))


def test_symmetries_are_automorphisms_that_map_chunks_to_chunks():
    topo, coll = torus(3, 3), make_collective("allgather", 9)
    found = instance_symmetries(topo, signatures(coll))
    assert found and len(found) <= 8
    for ranks, chunks in found:
        assert is_automorphism(topo, ranks)
        for c in range(coll.num_chunks):
            image = chunks[c]
            assert coll.pre[image] == frozenset(ranks[r] for r in coll.pre[c])
    rooted = make_collective("broadcast", 8, root=0)
    assert all(ranks[0] == 0 for ranks, _ in instance_symmetries(dgx1(), signatures(rooted)))


@given(n=st.integers(2, 12), step=st.integers(1, 11))
def test_orbits_of_a_rotation_are_residues(n, step):
    from math import gcd

    step %= n
    rep = orbits(range(n), [lambda x: (x + step) % n])
    period = gcd(step, n) if step else n
    assert rep == {x: x % period for x in range(n)}


def test_rotation_is_a_single_cycle():
    assert is_single_cycle((1, 2, 3, 0)) and not is_single_cycle((1, 0, 3, 2))


def test_a_ring_is_its_own_reverse_and_reversal_is_an_involution():
    assert same_links(ring(6), reversed_topology(ring(6)))
    assert reversed_topology(reversed_topology(dgx1())).links == dgx1().links
