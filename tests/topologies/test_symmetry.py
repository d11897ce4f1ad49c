"""Topology symmetry: automorphisms that carry a collective to itself, orbits, reversal."""

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.topologies import dgx1, ring, torus
from collsynth.topologies.symmetry import (
    instance_symmetries,
    is_automorphism,
    is_single_cycle,
    joined_classes,
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


@given(st.data())
def test_orbits_are_the_closures_under_the_moves(data):
    # brute force: grow each item's orbit by applying every move until nothing new appears
    n = data.draw(st.integers(0, 30))
    perms = data.draw(st.lists(st.permutations(range(n)), max_size=3))
    names = data.draw(st.permutations([f"k{i:02d}" for i in range(n)]))  # items that are not indices, unsorted
    moves = [lambda x, p=p: names[p[names.index(x)]] for p in perms]
    rep = orbits(names, moves)
    for x in names:
        orbit, frontier = {x}, [x]
        while frontier:
            frontier = [m(y) for y in frontier for m in moves if m(y) not in orbit]
            orbit.update(frontier)
        assert rep[x] == min(orbit)


def test_joined_classes_links_chains_to_their_lowest_index():
    # a chain 5-4-3-2-1-0 given as one image array, and an index joined only through another's image
    image = np.array([0, 0, 1, 2, 3, 4, 6])
    assert joined_classes(7, [image]).tolist() == [0, 0, 0, 0, 0, 0, 6]
    assert joined_classes(0, [np.array([], dtype=np.int64)]).tolist() == []


def test_rotation_is_a_single_cycle():
    assert is_single_cycle((1, 2, 3, 0)) and not is_single_cycle((1, 0, 3, 2))


def test_a_ring_is_its_own_reverse_and_reversal_is_an_involution():
    assert same_links(ring(6), reversed_topology(ring(6)))
    assert reversed_topology(reversed_topology(dgx1())).link_list == dgx1().link_list
