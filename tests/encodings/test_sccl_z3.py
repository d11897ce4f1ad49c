"""The SCCL encoding: answers, symmetry restriction, round splits, time-outs, the direct AllReduce encoding."""

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.core.enums import Status
from collsynth.encodings.sccl_z3 import (
    EncodingError,
    SCCLEncoding,
    instance_symmetries,
    tight_rounds,
)
from collsynth.schedule import Algorithm, Send, Step, verify
from collsynth.synth.portfolio import InstanceSolver, balanced_splits
from collsynth.synth.sccl_greedy import greedy_schedule
from collsynth.topologies import Link, Switch, Topology, dgx1, fully_connected, line, ring
from collsynth.topologies.symmetry import orbits, reversed_topology

SAT, UNSAT, TIMEOUT = Status.SAT, Status.UNSAT, Status.TIMEOUT


def as_algorithm(topology, collective, schedule):
    steps = tuple(Step(r, tuple(Send(s[0], s[1], s[2], s[3] if len(s) > 3 else "copy") for s in sends))
                  for r, sends in schedule)
    return Algorithm("test", topology, collective, steps)


def test_dgx1_allgather_instances():
    topo = dgx1()
    answers = {}
    for chunks, steps, rounds in [(1, 2, 2), (2, 2, 3), (3, 2, 4), (3, 3, 4)]:
        coll = make_collective("allgather", 8, chunks)
        outcome = InstanceSolver(topo, coll, steps).solve(rounds, time_limit=60)
        answers[(chunks, steps, rounds)] = outcome.status
        if outcome.status == SAT:
            assert outcome.rounds <= rounds
            verify(as_algorithm(topo, coll, outcome.schedule))
    assert answers == {(1, 2, 2): SAT, (2, 2, 3): SAT, (3, 2, 4): UNSAT, (3, 3, 4): SAT}


def test_too_few_steps_is_unsat_without_solving():
    enc = SCCLEncoding(ring(8), make_collective("allgather", 8), 3)
    assert enc.infeasible_reason is not None and "4 hops away" in enc.infeasible_reason
    assert enc.solve(100).status == UNSAT


def test_rounds_below_steps_are_unsat():
    assert SCCLEncoding(ring(4), make_collective("allgather", 4), 2).solve(1).status == UNSAT


def test_timeout_is_not_unsat():
    # 8 chunks per pair on DGX-1 AllToAll within 21 rounds is impossible (bound 8/3), but proving it takes long
    solver = InstanceSolver(dgx1(), make_collective("alltoall", 8, 8), 3)
    outcome = solver.solve(21, time_limit=0.05)
    assert outcome.status == TIMEOUT
    assert outcome.schedule is None and outcome.rounds == 21


def test_combining_collectives_are_refused():
    with pytest.raises(EncodingError, match="non-combining dual"):
        SCCLEncoding(ring(4), make_collective("reducescatter", 4), 2)


def test_symmetries_of_rings_and_dgx1():
    ring_syms = instance_symmetries(ring(6), make_collective("allgather", 6))
    assert ((1, 2, 3, 4, 5, 0), (1, 2, 3, 4, 5, 0)) in ring_syms  # the rotation, chunks following their owner
    dgx = instance_symmetries(dgx1(), make_collective("allgather", 8, 2))
    assert sorted(r for r, _ in dgx) == [(2, 3, 0, 1, 6, 7, 4, 5), (4, 5, 6, 7, 0, 1, 2, 3), (6, 7, 4, 5, 2, 3, 0, 1)]
    for ranks, chunks in dgx:
        assert chunks[2 * 1 + 1] == 2 * ranks[1] + 1
    # a rooted collective keeps only the symmetries that fix its root
    rooted = instance_symmetries(ring(6), make_collective("broadcast", 6, root=2))
    assert rooted and all(ranks[2] == 2 for ranks, _ in rooted)
    assert instance_symmetries(dgx1(), make_collective("gather", 8, root=0)) == []


def test_symmetries_respect_switches():
    links = tuple(Link(a, b) for a in range(4) for b in range(4) if a != b)
    one_port = Switch("port0", frozenset((0, b) for b in range(1, 4)))
    topo = Topology("odd-switch", 4, links, (one_port,))
    for ranks, _ in instance_symmetries(topo, make_collective("allgather", 4)):
        assert ranks[0] == 0


def test_symmetric_schedules_verify():
    topo = ring(8)
    coll = make_collective("allgather", 8, 2)
    rotation = [g for g in instance_symmetries(topo, coll) if g[0] == (1, 2, 3, 4, 5, 6, 7, 0)]
    # with the reflections too there is no symmetric 7-round schedule (an odd number of rounds)
    assert SCCLEncoding(topo, coll, 4, symmetries=instance_symmetries(topo, coll)).solve(7).status == UNSAT
    enc = SCCLEncoding(topo, coll, 4, symmetries=rotation)
    outcome = enc.solve(7, time_limit=60)
    assert outcome.status == SAT and outcome.rounds == 7
    algorithm = as_algorithm(topo, coll, outcome.schedule)
    verify(algorithm)
    ranks, chunks = rotation[0]
    sends = {(s.chunk, s.src, s.dst, t) for t, s in algorithm.sends()}
    assert {(chunks[c], ranks[u], ranks[v], t) for c, u, v, t in sends} == sends


def test_reversed_topology():
    topo = Topology("one-way", 3, (Link(0, 1, 2), Link(1, 2)), (Switch("s", frozenset({(0, 1)}), 1),))
    rev = reversed_topology(topo)
    assert {(x.src, x.dst, x.bandwidth) for x in rev.link_list} == {(1, 0, 2), (2, 1, 1)}
    assert rev.switches[0].links == frozenset({(1, 0)})


def test_tight_rounds_counts_links_and_switches():
    topo = Topology("t", 3, (Link(0, 1, 2), Link(0, 2), Link(2, 1)), (Switch("in1", frozenset({(0, 1), (2, 1)})),))
    assert tight_rounds(topo, []) == 1
    assert tight_rounds(topo, [(0, 0, 1), (1, 0, 1)]) == 2  # the switch lets one chunk a round into rank 1
    assert tight_rounds(topo, [(0, 0, 2), (1, 0, 2), (2, 0, 2)]) == 3


@given(st.integers(1, 12), st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(1, 8))
def test_balanced_splits(rounds, caps, limit):
    splits = balanced_splits(rounds, caps, limit)
    assert len(splits) <= limit
    assert len(set(splits)) == len(splits)
    for split in splits:
        assert sum(split) == rounds and all(1 <= r <= cap for r, cap in zip(split, caps, strict=True))
    assert [max(s) for s in splits] == sorted(max(s) for s in splits)
    feasible = len(caps) <= rounds <= sum(caps)
    assert bool(splits) == feasible


def test_orbits_pick_the_smallest_member():
    rotate = [lambda x: (x + 2) % 6]
    assert orbits(range(6), rotate) == {0: 0, 1: 1, 2: 0, 3: 1, 4: 0, 5: 1}


def test_allreduce_direct_encoding_beats_the_composition_on_ring4():
    topo, coll = ring(4), make_collective("allreduce", 4)
    # ReduceScatter + AllGather needs 2 + 2 steps; directly, 3 steps and 3 rounds (= the gossip bound)
    solver = InstanceSolver(topo, coll, 3)
    outcome = solver.solve(3, time_limit=60)
    assert outcome.status == SAT
    algorithm = as_algorithm(topo, coll, outcome.schedule)
    verify(algorithm)
    assert algorithm.bandwidth_cost == Fraction(3)
    assert solver.solve(2, time_limit=60).status == UNSAT


def test_allreduce_direct_encoding_two_steps_on_a_line_is_unsat():
    assert InstanceSolver(line(4), make_collective("allreduce", 4), 2).solve(100).status == UNSAT


def test_fully_connected_allgather_in_one_step():
    coll = make_collective("allgather", 5)
    outcome = InstanceSolver(fully_connected(5), coll, 1).solve(1)
    assert outcome.status == SAT
    verify(as_algorithm(fully_connected(5), coll, outcome.schedule))


@st.composite
def small_problems(draw):
    n = draw(st.integers(3, 5))
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    chosen = draw(st.sets(st.sampled_from(pairs), max_size=len(pairs)))
    links = tuple(Link(a, b, draw(st.integers(1, 2))) for a, b in sorted(set(chosen) | {(r, (r + 1) % n)
                                                                                      for r in range(n)}))
    name = draw(st.sampled_from(["allgather", "alltoall", "broadcast", "gather", "scatter"]))
    return Topology("random", n, links), make_collective(name, n, draw(st.integers(1, 3)), root=0 if name in (
        "broadcast", "gather", "scatter") else None)


@given(small_problems(), st.integers(0, 2))
def test_greedy_schedule_is_an_algorithm(problem, slack):
    from collsynth.encodings.bounds import lower_bound_steps

    topology, coll = problem
    steps = lower_bound_steps(topology, coll) + slack
    schedule = greedy_schedule(topology, coll, steps)
    assert schedule is not None and len(schedule) == steps
    verify(as_algorithm(topology, coll, schedule))
    assert greedy_schedule(topology, coll, lower_bound_steps(topology, coll) - 1) is None
