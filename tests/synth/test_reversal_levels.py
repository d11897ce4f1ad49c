"""Reversal into a reduction exists once (`schedule.reversed_sends`) and three levels use it: Algorithm steps
(`reversed_into_reduction`), the MILP's transfer DAG (`synth.milp.combine.reversed_problem`, which keeps the
dependencies the MILP re-schedules) and the cluster greedy's timed transfers (`greedy._reverse`).

Fed one step-synchronous dual schedule (every send of step k runs over [k, k+1]), the three levels must build
the same reduction, step by step; a level that reversed on its own and differently would fail here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import Collective, make_collective
from collsynth.core.enums import Op
from collsynth.encodings.milp_ordering import ScheduleProblem, Timing, Transfer, orders_from_times
from collsynth.schedule import Algorithm, Send, Step, TimedSends, reversed_into_reduction, reversed_sends, verify
from collsynth.synth.cluster.greedy import _reverse, _steps
from collsynth.synth.cluster.timexp import Transfers
from collsynth.synth.milp.combine import reversed_candidate, reversed_problem, to_algorithm
from collsynth.synth.milp.errors import MilpSynthesisError
from collsynth.synth.milp.schedule_stage import Candidate
from collsynth.topologies import Link, Topology, fully_connected, ring
from collsynth.topologies.symmetry import reversed_topology


def ring_allgather(n: int) -> Algorithm:
    steps = tuple(Step(1, tuple(Send((r - t) % n, r, (r + 1) % n) for r in range(n))) for t in range(n - 1))
    return Algorithm(f"ring-ag-{n}", ring(n), make_collective("allgather", n), steps)


def doubling_broadcast(n: int, root: int) -> Algorithm:
    """Binomial broadcast on the fully connected topology: at step k every holder i sends to i + 2^k."""
    steps, k = [], 1
    while k < n:
        steps.append(Step(1, tuple(Send(0, (root + i) % n, (root + i + k) % n) for i in range(min(k, n - k)))))
        k *= 2
    return Algorithm("doubling", fully_connected(n), make_collective("broadcast", n, root=root), tuple(steps))


def _flat(dual: Algorithm) -> tuple[list[Send], list[int]]:
    sends = [s for step in dual.steps for s in step.sends]
    return sends, [t for t, step in enumerate(dual.steps) for _ in step.sends]


Timed = list[tuple[float, int, int, int, str]]  # (start, chunk, src, dst, op) per send, sorted


def algorithm_level(dual: Algorithm, topology: Topology, collective: Collective) -> Timed:
    """Steps as times: send c at step k is [k, k+1]."""
    reduction = reversed_into_reduction(dual, topology, collective)
    return sorted((float(k), s.chunk, s.src, s.dst, str(s.op)) for k, s in reduction.sends())


def greedy_level(dual: Algorithm, topology: Topology, collective: Collective) -> Timed:
    sends, step_of = _flat(dual)
    transfers = Transfers(*(np.array([getattr(s, k) for s in sends]) for k in ("chunk", "src", "dst")),
                          np.array(step_of, dtype=float), np.ones(len(sends)))
    reverse = _reverse(transfers)
    verify(Algorithm("greedy-level", topology, collective, _steps(reverse, Op.REDUCE)))
    return sorted(zip(reverse.start_us.tolist(), reverse.chunk.tolist(), reverse.src.tolist(), reverse.dst.tolist(),
                      ["reduce"] * len(sends), strict=True))


def milp_level(dual: Algorithm, topology: Topology, collective: Collective) -> Timed:
    """The dual as the MILP's transfers (each waits for the send that brought its chunk to its source), unit
    cost per link, reversed by the MILP's reversal: the reduction's DAG and its mirrored start times."""
    sends, step_of = _flat(dual)
    delivered: dict[tuple[int, int], int] = {}
    transfers = []
    for t, s in enumerate(sends):
        deps = (delivered[(s.chunk, s.src)],) if (s.chunk, s.src) in delivered else ()
        transfers.append(Transfer(s.chunk, s.src, s.dst, Op.COPY, deps))
        delivered[(s.chunk, s.dst)] = t
    arcs = {tr.arc for tr in transfers} | {(tr.dst, tr.src) for tr in transfers}
    problem = ScheduleProblem(tuple(transfers), dict.fromkeys(arcs, 1.0), dict.fromkeys(arcs, 0.0), ())
    start = [float(k) for k in step_of]
    forward = Candidate(problem, orders_from_times(problem, start),
                        Timing(tuple(start), tuple(x + 1.0 for x in start), float(len(dual.steps))))
    reduction, mirrored = reversed_problem(forward, topology)
    # a reduction waits for the reductions of the sends that waited for it
    assert {(t, d) for t, tr in enumerate(transfers) for d in tr.deps} == {
        (d, t) for t, tr in enumerate(reduction.transfers) for d in tr.deps}
    # what the MILP starts from: the mirror's orders, re-timed (earliest starts, never later than the mirror's)
    candidate = reversed_candidate(forward, topology)
    assert candidate.problem == reduction
    assert all(a <= b for a, b in zip(candidate.timing.start, mirrored, strict=True))
    mirrored_timing = Timing(tuple(mirrored), tuple(x + 1.0 for x in mirrored), forward.timing.makespan)
    verify(to_algorithm("milp-level", topology, collective, reduction, mirrored_timing, {}))
    return sorted((mirrored[t], tr.chunk, tr.src, tr.dst, str(tr.op)) for t, tr in enumerate(reduction.transfers))


def _check_levels(dual_on_reverse: Algorithm, topology: Topology, combining: str) -> None:
    collective = make_collective(combining, topology.num_ranks, root=dual_on_reverse.collective.root)
    expected = algorithm_level(dual_on_reverse, topology, collective)
    assert {op for *_, op in expected} == {"reduce"}
    assert greedy_level(dual_on_reverse, topology, collective) == expected
    assert milp_level(dual_on_reverse, topology, collective) == expected


@given(n=st.integers(2, 8))
@settings(max_examples=7, deadline=None)
def test_three_levels_reverse_a_ring_allgather_alike(n):
    dual = ring_allgather(n)
    on_reverse = Algorithm(dual.name, reversed_topology(ring(n)), dual.collective, dual.steps)
    _check_levels(on_reverse, ring(n), "reducescatter")


@given(n=st.integers(2, 9), root=st.integers(0, 8))
@settings(max_examples=10, deadline=None)
def test_three_levels_reverse_a_broadcast_tree_alike(n, root):
    dual = doubling_broadcast(n, root % n)
    _check_levels(dual, fully_connected(n), "reduce")


@given(starts=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 5)), min_size=1, max_size=12), data=st.data())
@settings(max_examples=40, deadline=None)
def test_reversed_sends_mirrors_time_and_turns_dependencies_around(starts, data):
    n = len(starts)
    start = np.array([s for s, _ in starts], dtype=float)
    duration = np.array([d for _, d in starts], dtype=float)
    after = tuple(tuple(sorted(data.draw(st.sets(st.integers(0, n - 1).filter(lambda d, t=t: d < t), max_size=3))))
                  for t in range(n))
    makespan = float((start + duration).max())
    sends = TimedSends(np.arange(n), np.arange(n), np.arange(n) + 1, start, duration, makespan, after)
    back = reversed_sends(sends)
    assert (back.src == sends.dst).all() and (back.dst == sends.src).all()
    # [s, s+d] -> [T-s-d, T-s]: every reduction fits in [0, T] and a send that waited now comes first
    assert (back.start >= 0).all() and (back.start + back.duration == makespan - start).all()
    assert back.after is not None
    assert {(t, d) for t, deps in enumerate(after) for d in deps} == {(d, t) for t, deps in enumerate(back.after)
                                                                      for d in deps}
    twice = reversed_sends(back)
    assert (twice.start == start).all() and twice.after == after and (twice.src == sends.src).all()


def test_the_milp_level_names_a_link_that_has_no_reverse():
    one_way = Topology("one-way-ring", 3, tuple(Link(r, (r + 1) % 3) for r in range(3)))
    forward_problem = ScheduleProblem((Transfer(0, 0, 1),), {(0, 1): 1.0}, {(0, 1): 0.0}, ())
    forward = Candidate(forward_problem, orders_from_times(forward_problem, [0.0]), Timing((0.0,), (1.0,), 1.0))
    with pytest.raises(MilpSynthesisError, match="has link 0->1 but no link 1->0"):
        reversed_candidate(forward, one_way)
