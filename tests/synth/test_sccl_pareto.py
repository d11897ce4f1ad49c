"""The Pareto sweep: the frontiers the spec names, bound-terminated sweeps, AllReduce, parallel, Ctrl-C."""

from fractions import Fraction

import pytest

from collsynth.collectives import make_collective
from collsynth.schedule import OPTIMAL, FrontierPoint, verify
from collsynth.synth.pareto import (
    BOUND_MET,
    MAX_CHUNKS,
    SweepInterrupted,
    pareto_frontier,
    pareto_optimal,
    sweep_document,
)
from collsynth.topologies import dgx1, fully_connected, ring


def triples(points):
    return [(p.chunks, p.steps, p.rounds) for p in points]


def tried(result, outcome):
    return {(a.chunks, a.steps, a.rounds) for a in result.tried if a.result == outcome}


@pytest.fixture(scope="module")
def dgx1_allgather():
    return pareto_frontier(dgx1(), make_collective("allgather", 8), time_limit=120)


def test_dgx1_allgather_frontier(dgx1_allgather):
    result = dgx1_allgather
    assert (result.steps_bound, result.bound) == (2, Fraction(7, 6))
    assert triples(result.points) == [(1, 2, 2), (2, 2, 3), (3, 3, 4), (4, 3, 5), (5, 3, 6), (6, 3, 7)]
    assert (3, 2, 4) in tried(result, "unsat")
    assert triples(result.frontier) == [(2, 2, 3), (6, 3, 7)]
    assert result.stopped == BOUND_MET and result.bound_met
    assert all(p.status == OPTIMAL for p in result.points)
    assert not tried(result, "timeout")
    for point in result.points:
        verify(point.algorithm)
        assert (point.algorithm.chunks, point.algorithm.num_steps, point.algorithm.rounds) == \
            (point.chunks, point.steps, point.rounds)


def test_dgx1_allgather_json_document(dgx1_allgather):
    doc = sweep_document(dgx1_allgather)
    assert doc["topology"] == "dgx1" and doc["collective"] == "allgather"
    assert doc["lower_bounds"] == {"steps": 2, "rounds_per_chunk": "7/6"}
    assert doc["frontier"] == [{"chunks": 2, "steps": 2, "rounds": 3, "status": "optimal"},
                               {"chunks": 6, "steps": 3, "rounds": 7, "status": "optimal"}]
    for entry in doc["tried"]:
        assert set(entry) == {"chunks", "steps", "rounds", "result", "seconds"}
        assert entry["result"] in ("sat", "unsat", "timeout")


def test_dgx1_reducescatter_frontier_is_allgathers_reversed():
    result = pareto_frontier(dgx1(), make_collective("reducescatter", 8), time_limit=120)
    assert triples(result.points) == [(1, 2, 2), (2, 2, 3), (3, 3, 4), (4, 3, 5), (5, 3, 6), (6, 3, 7)]
    assert triples(result.frontier) == [(2, 2, 3), (6, 3, 7)]
    for point in result.frontier:
        verify(point.algorithm)
        assert {s.op for _, s in point.algorithm.sends()} == {"reduce"}


def test_ring8_allgather_frontier():
    result = pareto_frontier(ring(8), make_collective("allgather", 8), time_limit=120)
    assert triples(result.points) == [(1, 4, 4), (2, 4, 7)]
    assert triples(result.frontier) == [(2, 4, 7)]
    assert result.bound == Fraction(7, 2)


def test_dgx1_gather_frontier():
    # SCCL reports (4,2,5) and (6,3,7); (6,2,7) exists too (it verifies) and dominates both.
    result = pareto_frontier(dgx1(), make_collective("gather", 8, root=0), time_limit=120)
    assert (4, 2, 5) in triples(result.points)
    assert triples(result.frontier) == [(6, 2, 7)]
    best = result.frontier[0]
    verify(best.algorithm)
    assert best.dominates(FrontierPoint(6, 3, 7, OPTIMAL)) and best.dominates(FrontierPoint(4, 2, 5, OPTIMAL))
    # with an odd-numbered root the other class of DGX-1 ranks gives SCCL's shape
    odd = pareto_frontier(dgx1(), make_collective("gather", 8, root=1), time_limit=120)
    assert triples(odd.frontier) == [(2, 2, 3), (6, 3, 7)]


def test_dgx1_scatter_terminates_at_the_bound():
    result = pareto_frontier(dgx1(), make_collective("scatter", 8), time_limit=120)
    assert result.bound == Fraction(7, 6)
    assert result.stopped == BOUND_MET
    assert result.frontier[-1].rounds_per_chunk == Fraction(7, 6)


def test_dgx1_alltoall_terminates_at_the_bound():
    result = pareto_frontier(dgx1(), make_collective("alltoall", 8), time_limit=120)
    assert result.stopped == BOUND_MET
    assert triples(result.frontier)[-1] == (3, 2, 8)


def test_fully_connected_alltoall():
    result = pareto_frontier(fully_connected(8), make_collective("alltoall", 8), time_limit=120)
    assert triples(result.frontier) == [(1, 1, 1)] and result.stopped == BOUND_MET


def test_dgx1_broadcast_tries_unreduced_fractions():
    # 1/6 (six disjoint trees) is approached but never reached in finitely many chunks: ends at max_chunks
    result = pareto_frontier(dgx1(), make_collective("broadcast", 8), max_chunks=7, time_limit=120)
    assert (6, 3, 3) in triples(result.points)  # 3/6 = 1/2 at 3 steps, though 1/2 at 1 step is impossible
    assert result.stopped == MAX_CHUNKS and not result.bound_met
    assert triples(result.frontier) == [(2, 2, 2), (7, 3, 3)]


@pytest.mark.slow
def test_dgx1_allreduce_composes_and_meets_the_bound():
    result = pareto_frontier(dgx1(), make_collective("allreduce", 8), time_limit=60)
    assert result.bound == Fraction(7, 3)
    assert result.bound_met
    frontier = triples(result.frontier)
    assert (6, 6, 14) in frontier  # ReduceScatter (6,3,7) + AllGather (6,3,7)
    assert (1, 3, 4) in frontier  # the direct encoding: 3 steps, which the composition (>= 4) cannot do
    for point in result.frontier:
        verify(point.algorithm)
    assert {a.part for a in result.tried} <= {"allgather", "direct"}


def test_ring4_allreduce_direct_meets_the_bound():
    result = pareto_frontier(ring(4), make_collective("allreduce", 4), time_limit=60)
    # composition: ReduceScatter (2,2,3) + AllGather (2,2,3) = (2,4,6); the direct encoding does better
    assert (2, 4, 6) in triples(result.points)
    assert triples(result.frontier) == [(1, 2, 4), (1, 3, 3)]
    assert result.stopped == BOUND_MET
    for point in result.points:
        verify(point.algorithm)


def test_reduce_is_broadcast_reversed():
    result = pareto_frontier(ring(4), make_collective("reduce", 4, root=1), time_limit=60)
    broadcast = pareto_frontier(ring(4), make_collective("broadcast", 4, root=1), time_limit=60)
    assert triples(result.frontier) == triples(broadcast.frontier)
    for point in result.frontier:
        verify(point.algorithm)
        assert point.algorithm.collective.root == 1


def test_parallel_sweep_gives_the_same_frontier():
    result = pareto_frontier(ring(8), make_collective("allgather", 8), jobs=2, time_limit=120)
    assert triples(result.frontier) == [(2, 4, 7)]
    for point in result.frontier:
        verify(point.algorithm)


def test_timeouts_are_recorded_as_timeouts():
    result = pareto_frontier(dgx1(), make_collective("alltoall", 8), max_chunks=1, max_steps=3, time_limit=0.001)
    assert tried(result, "timeout")
    assert not tried(result, "unsat")
    # the quick shortest-path schedule stands in, marked feasible (not proven least)
    assert result.points and all(p.status == "feasible" for p in result.points)
    for point in result.points:
        verify(point.algorithm)


@pytest.mark.usefixtures("z3_contexts_freed")
def test_ctrl_c_keeps_the_finished_points():
    seen = []

    def stop_after_two_points(kind, payload):
        if kind == "point":
            seen.append(payload)
            if len(seen) == 2:
                raise KeyboardInterrupt

    with pytest.raises(SweepInterrupted) as info:
        pareto_frontier(dgx1(), make_collective("allgather", 8), on_event=stop_after_two_points)
    partial = info.value.result
    del info  # its traceback holds the sweep's solvers and the test's frame: a cycle around a z3 context
    assert triples(partial.points) == [(1, 2, 2), (2, 2, 3)]
    assert partial.stopped == "interrupted"


def test_pareto_optimal_keeps_the_fewest_chunks_among_equals():
    points = [FrontierPoint(2, 2, 3, OPTIMAL), FrontierPoint(4, 2, 6, OPTIMAL), FrontierPoint(1, 3, 3, OPTIMAL),
              FrontierPoint(3, 3, 4, OPTIMAL)]
    assert triples(pareto_optimal(points)) == [(2, 2, 3), (3, 3, 4)]


def test_bad_arguments():
    from collsynth.core.errors import CollsynthError

    with pytest.raises(CollsynthError, match="max chunks"):
        pareto_frontier(ring(4), make_collective("allgather", 4), max_chunks=0)
    with pytest.raises(CollsynthError, match="jobs"):
        pareto_frontier(ring(4), make_collective("allgather", 4), jobs=0)


@pytest.mark.parametrize(("topology", "collective", "pareto"), [
    ("ring:16", "allgather", [(2, 8, 15)]),
    ("fully_connected:16", "allgather", [(1, 1, 1)]),
    ("dgx2", "allgather", [(1, 1, 15)]),
])
def test_larger_frontiers(topology, collective, pareto):
    from collsynth.topologies import resolve_topology

    topo = resolve_topology(topology)
    result = pareto_frontier(topo, make_collective(collective, topo.num_ranks), time_limit=120)
    assert triples(result.frontier) == pareto and result.stopped == BOUND_MET
