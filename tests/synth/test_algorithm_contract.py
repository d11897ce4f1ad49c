"""The Algorithm contract: JSON round trip and verify() catching each kind of broken schedule."""

import pytest

from collsynth.collectives import make_collective
from collsynth.schedule import COPY, REDUCE, Algorithm, AlgorithmError, Send, Step, verify
from collsynth.topologies import Link, Switch, Topology, fully_connected, ring


def ring_allgather(n: int) -> Algorithm:
    steps = [Step(1, tuple(Send((r - k) % n, r, (r + 1) % n) for r in range(n))) for k in range(n - 1)]
    return Algorithm("ring-ag", ring(n), make_collective("allgather", n), tuple(steps))


def ring_reducescatter_then_allgather(n: int) -> Algorithm:
    """Ring AllReduce on n ranks, n chunks: n-1 reduce steps then n-1 copy steps."""
    rs = [Step(1, tuple(Send((r - k - 1) % n, r, (r + 1) % n, REDUCE) for r in range(n))) for k in range(n - 1)]
    # after RS, rank r holds the full sum of chunk r
    ag = [Step(1, tuple(Send((r - k) % n, r, (r + 1) % n, COPY) for r in range(n))) for k in range(n - 1)]
    return Algorithm("ring-ar", ring(n), make_collective("allreduce", n), tuple(rs + ag))


def test_ring_allgather_verifies_and_costs():
    algo = ring_allgather(6)
    verify(algo)
    assert (algo.num_steps, algo.rounds, algo.chunks) == (5, 5, 1)
    assert algo.cost(alpha=1.0, beta=2.0, size=3.0) == pytest.approx(5 * 1.0 + 5 * 3.0 * 2.0)


def test_json_round_trip_preserves_everything():
    algo = ring_reducescatter_then_allgather(4)
    back = Algorithm.from_json(algo.to_json())
    assert back == algo
    verify(back)


def test_ring_allreduce_verifies():
    verify(ring_reducescatter_then_allgather(5))


def test_missing_link_is_rejected():
    algo = ring_allgather(6)
    bad = Step(1, (Send(0, 0, 3),))
    with pytest.raises(AlgorithmError, match="no link 0->3"):
        verify(Algorithm("x", algo.topology, algo.collective, (bad,) + algo.steps))


def test_sending_a_chunk_not_yet_held_is_rejected():
    coll = make_collective("allgather", 3)
    algo = Algorithm("x", fully_connected(3), coll, (Step(1, (Send(1, 0, 2),)),))
    with pytest.raises(AlgorithmError, match="does not hold chunk 1"):
        verify(algo)


def test_postcondition_failure_is_rejected():
    algo = ring_allgather(4)
    with pytest.raises(AlgorithmError, match="postcondition"):
        verify(Algorithm("x", algo.topology, algo.collective, algo.steps[:-1]))


def test_link_capacity_counts_rounds():
    topo = fully_connected(3)
    coll = make_collective("allgather", 3, chunks=2)
    two_on_one_link = Step(1, (Send(0, 0, 1), Send(1, 0, 1)))
    with pytest.raises(AlgorithmError, match="exceed its capacity"):
        verify(Algorithm("x", topo, coll, (two_on_one_link,)))
    # with two rounds the same step fits; the schedule is still incomplete, so the postcondition fails
    with pytest.raises(AlgorithmError, match="postcondition"):
        verify(Algorithm("x", topo, coll, (Step(2, two_on_one_link.sends),)))


def test_switch_budget_is_enforced():
    links = tuple(Link(s, d) for s in range(3) for d in range(3) if s != d)
    out0 = Switch("out0", frozenset({(0, 1), (0, 2)}), bandwidth=1)
    topo = Topology("sw", 3, links, (out0,))
    coll = make_collective("broadcast", 3, root=0)
    with pytest.raises(AlgorithmError, match="switch 'out0'"):
        verify(Algorithm("x", topo, coll, (Step(1, (Send(0, 0, 1), Send(0, 0, 2))),)))
    verify(Algorithm("x", topo, coll, (Step(1, (Send(0, 0, 1),)), Step(1, (Send(0, 0, 2),)))))


def test_reduce_in_non_combining_collective_is_rejected():
    algo = Algorithm("x", ring(3), make_collective("allgather", 3), (Step(1, (Send(0, 0, 1, REDUCE),)),))
    with pytest.raises(AlgorithmError, match="non-combining"):
        verify(algo)


def test_double_counting_a_contribution_is_rejected():
    coll = make_collective("reduce", 3, root=0)
    steps = (Step(1, (Send(0, 1, 0, REDUCE),)), Step(1, (Send(0, 1, 0, REDUCE),)))
    with pytest.raises(AlgorithmError, match="twice"):
        verify(Algorithm("x", fully_connected(3), coll, steps))


def test_incomplete_reduction_is_rejected():
    coll = make_collective("reduce", 3, root=0)
    steps = (Step(1, (Send(0, 1, 0, REDUCE),)),)
    with pytest.raises(AlgorithmError, match="summed over ranks"):
        verify(Algorithm("x", fully_connected(3), coll, steps))
    verify(Algorithm("x", fully_connected(3), coll, (Step(1, (Send(0, 1, 0, REDUCE), Send(0, 2, 0, REDUCE))),)))


def test_zero_rounds_rejected():
    algo = ring_allgather(3)
    with pytest.raises(AlgorithmError, match="rounds"):
        verify(Algorithm("x", algo.topology, algo.collective, (Step(0, algo.steps[0].sends),) + algo.steps[1:]))


def test_malformed_json_is_a_clear_error():
    with pytest.raises(AlgorithmError, match="steps: missing"):
        Algorithm.from_dict({"name": "x", "topology": ring(3).to_dict(),
                             "collective": make_collective("allgather", 3).to_dict()})
    with pytest.raises(AlgorithmError, match="not valid JSON"):
        Algorithm.from_json("{")
