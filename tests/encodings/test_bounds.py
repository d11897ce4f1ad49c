"""Lower bounds on steps and on rounds per chunk (the HiGHS flow LP), and impossible collectives."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.core.enums import Status
from collsynth.core.errors import CollsynthError
from collsynth.encodings.bounds import ImpossibleCollectiveError, lower_bound_rounds_per_chunk, lower_bound_steps
from collsynth.synth.portfolio import InstanceSolver
from collsynth.topologies import Link, Topology, dgx1, fully_connected, line, ring


@pytest.mark.parametrize(("topology", "collective", "steps", "ratio"), [
    (dgx1(), "allgather", 2, Fraction(7, 6)),
    (dgx1(), "reducescatter", 2, Fraction(7, 6)),
    (dgx1(), "gather", 2, Fraction(7, 6)),
    # data is conserved on the way: the root's 6 links carry 7 chunks (not 7/24 as a copying model says)
    (dgx1(), "scatter", 2, Fraction(7, 6)),
    (dgx1(), "alltoall", 2, Fraction(8, 3)),  # 16 chunks cross the 6-link bisection each way
    (dgx1(), "broadcast", 2, Fraction(1, 6)),
    (dgx1(), "reduce", 2, Fraction(1, 6)),
    (dgx1(), "allreduce", 2, Fraction(7, 3)),  # one-way gossip: 2(n-1) sends per chunk over 48 link units
    (ring(8), "allgather", 4, Fraction(7, 2)),
    (ring(8), "alltoall", 4, Fraction(8)),
    (ring(8), "allreduce", 4, Fraction(7)),
    (fully_connected(8), "alltoall", 1, Fraction(1)),
    (line(4), "allgather", 3, Fraction(3)),
])
def test_known_bounds(topology, collective, steps, ratio):
    coll = make_collective(collective, topology.num_ranks)
    assert lower_bound_steps(topology, coll) == steps
    assert lower_bound_rounds_per_chunk(topology, coll) == ratio


def test_bound_is_per_chunk_whatever_the_chunk_factor():
    assert lower_bound_rounds_per_chunk(dgx1(), make_collective("allgather", 8, 3)) == Fraction(7, 6)


def test_disconnected_topology_is_impossible():
    two_islands = Topology("islands", 4, (Link(0, 1), Link(1, 0), Link(2, 3), Link(3, 2)))
    coll = make_collective("allgather", 4)
    with pytest.raises(ImpossibleCollectiveError, match="no path from rank") as info:
        lower_bound_steps(two_islands, coll)
    assert isinstance(info.value, CollsynthError)
    with pytest.raises(ImpossibleCollectiveError):
        lower_bound_rounds_per_chunk(two_islands, coll)


def test_one_way_links_make_broadcast_from_the_sink_impossible():
    chain = Topology("chain", 3, (Link(0, 1), Link(1, 2)))
    assert lower_bound_steps(chain, make_collective("broadcast", 3, root=0)) == 2
    with pytest.raises(ImpossibleCollectiveError):
        lower_bound_steps(chain, make_collective("broadcast", 3, root=2))


@st.composite
def small_instances(draw):
    n = draw(st.integers(3, 4))
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    chosen = draw(st.sets(st.sampled_from(pairs), min_size=n, max_size=len(pairs)))
    ring_links = {(r, (r + 1) % n) for r in range(n)}  # strongly connected
    links = tuple(Link(a, b, draw(st.integers(1, 2))) for a, b in sorted(set(chosen) | ring_links))
    name = draw(st.sampled_from(["allgather", "broadcast", "gather", "scatter", "alltoall"]))
    return Topology("random", n, links), make_collective(name, n, draw(st.integers(1, 2)))


@given(small_instances())
def test_bounds_never_exceed_what_the_solver_achieves(instance):
    topology, coll = instance
    steps = lower_bound_steps(topology, coll)
    ratio = lower_bound_rounds_per_chunk(topology, coll)
    solver = InstanceSolver(topology, coll, steps)
    outcome = solver.solve(solver.max_useful_rounds, time_limit=30)
    assert outcome.status == Status.SAT  # unlimited rounds: the step bound is always achievable
    assert Fraction(outcome.rounds, coll.chunks) >= ratio
    if steps > 1:
        assert InstanceSolver(topology, coll, steps - 1).solve(10 ** 6).status == "unsat"
