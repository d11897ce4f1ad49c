"""The vectorised copy-schedule check agrees with the send-by-send reference replay, on random valid schedules
and on random corruptions of them; `verify` raises exactly when the reference does, with its message."""

from __future__ import annotations

import random
from collections.abc import Callable
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from collsynth.collectives import CollectiveError, custom_collective, make_collective
from collsynth.schedule import COPY, REDUCE, Algorithm, AlgorithmError, Send, Step, verify
from collsynth.schedule.verify import verify_reference
from collsynth.schedule.verify_fast import condition_keys, copy_schedule_is_valid, index_dtype
from collsynth.schedule.verify_sums import sum_schedule_is_valid
from collsynth.topologies import Topology
from collsynth.topologies.model import Link, Switch

COLLECTIVES = ("allgather", "broadcast", "gather", "scatter", "alltoall")


def _topology(rng: random.Random, n: int) -> Topology:
    pairs = [(u, (u + 1) % n) for u in range(n)]  # a ring keeps every instance reachable
    pairs += [(u, v) for u in range(n) for v in range(n) if u != v and rng.random() < 0.3]
    pairs = sorted(set(pairs))
    links = tuple(Link(u, v, bandwidth=rng.choice((1, 1, 2))) for u, v in pairs)
    switches: tuple[Switch, ...] = ()
    if rng.random() < 0.5:
        chosen = frozenset(rng.sample(pairs, k=max(2, len(pairs) // 2)))
        switches = (Switch("sw", chosen, bandwidth=rng.choice((1, 2, 3))),)
    return Topology(f"random{n}", n, links, switches)


def _schedule(rng: random.Random, topo: Topology, name: str, chunks: int) -> Algorithm:
    """A random schedule that respects holdings (capacities may or may not hold), run until done or 12 steps."""
    coll = make_collective(name, topo.num_ranks, chunks, root=0)
    holds = {(c, r) for c in range(coll.num_chunks) for r in coll.pre[c]}
    steps = []
    for _ in range(12):
        options = [(c, x.src, x.dst) for (c, r) in sorted(holds) for x in topo.link_list if x.src == r
                   and (c, x.dst) not in holds]
        if not options:
            break
        picked = rng.sample(options, k=min(len(options), rng.randint(1, 6)))
        rounds = rng.choice((1, 1, 2))
        steps.append(Step(rounds, tuple(Send(c, u, v, COPY) for c, u, v in picked)))
        holds |= {(c, v) for c, _, v in picked}
    return Algorithm("random", topo, coll, tuple(steps))


def _corrupt(rng: random.Random, algo: Algorithm) -> Algorithm:
    steps = [list(s.sends) for s in algo.steps]
    rounds = [s.rounds for s in algo.steps]
    n, k = algo.topology.num_ranks, algo.collective.num_chunks
    if not steps:
        return algo
    t = rng.randrange(len(steps))
    kind = rng.randrange(7)
    if kind == 0 and steps[t]:  # drop a send
        steps[t].pop(rng.randrange(len(steps[t])))
    elif kind == 1 and steps[t]:  # another source
        s = rng.choice(steps[t])
        steps[t].append(Send(s.chunk, rng.randrange(n), s.dst))
    elif kind == 2 and steps[t]:  # another chunk
        s = rng.choice(steps[t])
        steps[t].append(Send(rng.randrange(k), s.src, s.dst))
    elif kind == 3 and steps[t]:  # duplicate (capacity)
        steps[t] += [rng.choice(steps[t])] * rng.randint(1, 3)
    elif kind == 4 and steps[t]:  # reduce in a copy collective
        s = steps[t].pop(0)
        steps[t].append(Send(s.chunk, s.src, s.dst, REDUCE))
    elif kind == 5:  # swap two steps (order of holdings)
        u = rng.randrange(len(steps))
        steps[t], steps[u] = steps[u], steps[t]
    else:  # fewer rounds, or a send on a missing link
        if rng.random() < 0.5:
            rounds[t] = rng.choice((0, 1))
        else:
            u, v = rng.sample(range(n), 2)
            steps[t].append(Send(0, u, v))
    return Algorithm(algo.name, algo.topology, algo.collective,
                     tuple(Step(r, tuple(s)) for r, s in zip(rounds, steps, strict=True)))


def _reference_accepts(algo: Algorithm) -> bool:
    try:
        verify_reference(algo)
    except AlgorithmError:
        return False
    return True


@settings(max_examples=150, deadline=None)
def _assert_paths_agree(algo: Algorithm, fast_check: Callable[[Algorithm], bool]) -> None:
    """The fast check and the send-by-send reference accept the same schedules; on a fault, verify() (fast path
    first) raises exactly the reference's message."""
    expected = _reference_accepts(algo)
    assert fast_check(algo) == expected
    if expected:
        verify(algo)
    else:
        with pytest.raises(AlgorithmError) as fast:
            verify(algo)
        with pytest.raises(AlgorithmError) as ref:
            verify_reference(algo)
        assert str(fast.value) == str(ref.value)


@given(seed=st.integers(0, 10**9), n=st.integers(2, 5), name=st.sampled_from(COLLECTIVES),
       chunks=st.integers(1, 2), corruptions=st.integers(0, 2))
def test_fast_check_agrees_with_the_reference(seed: int, n: int, name: str, chunks: int, corruptions: int) -> None:
    rng = random.Random(seed)
    algo = _schedule(rng, _topology(rng, n), name, chunks)
    for _ in range(corruptions):
        algo = _corrupt(rng, algo)
    _assert_paths_agree(algo, copy_schedule_is_valid)


def test_both_outcomes_are_exercised() -> None:
    """The generator above yields valid and invalid schedules (so the agreement is not vacuous)."""
    outcomes = set()
    for seed in range(60):
        rng = random.Random(seed)
        algo = _schedule(rng, _topology(rng, 4), "allgather", 1)
        if seed % 2:
            algo = _corrupt(rng, algo)
        outcomes.add(_reference_accepts(algo))
    assert outcomes == {True, False}


def test_a_late_source_is_rejected_with_the_step_named() -> None:
    topo = Topology("line3", 3, (Link(0, 1), Link(1, 2)))
    coll = make_collective("broadcast", 3, 1, root=0)
    late = Algorithm("late", topo, coll, (Step(1, (Send(0, 0, 1), Send(0, 1, 2))),))
    assert not copy_schedule_is_valid(late)
    with pytest.raises(AlgorithmError, match="step 0.*rank 1 does not hold chunk 0"):
        verify(late)
    fine = Algorithm("fine", topo, coll, (Step(1, (Send(0, 0, 1),)), Step(1, (Send(0, 1, 2),))))
    assert copy_schedule_is_valid(fine)
    verify(fine)


COMBINING = ("reducescatter", "allreduce", "reduce")


def _sum_schedule(rng: random.Random, topo: Topology, name: str, chunks: int) -> Algorithm:
    """Random copies and reduces from holders: sometimes valid, often adding a contribution twice."""
    coll = make_collective(name, topo.num_ranks, chunks, root=0)
    holds = {(c, r) for c in range(coll.num_chunks) for r in coll.pre[c]}
    steps = []
    for _ in range(10):
        options = [(c, x.src, x.dst) for (c, r) in sorted(holds) for x in topo.link_list if x.src == r]
        picked = rng.sample(options, k=min(len(options), rng.randint(1, 5)))
        sends = tuple(Send(c, u, v, REDUCE if (c, v) in holds and rng.random() < 0.8 else COPY) for c, u, v in picked)
        steps.append(Step(rng.choice((1, 2)), sends))
        holds |= {(c, v) for c, _, v in picked}
    return Algorithm("random-sum", topo, coll, tuple(steps))


def _greedy_sum(rng: random.Random, topo: Topology, name: str, chunks: int) -> Algorithm:
    from collsynth.synth.cluster.greedy import greedy

    coll = make_collective(name, topo.num_ranks, chunks, root=0)
    plain = Topology(topo.name, topo.num_ranks, topo.link_list)  # the greedy's switch lanes are per instant
    algo = greedy(plain, coll, 1 << 20, seed=rng.randrange(4)).algorithm
    assert algo is not None
    return algo


@settings(max_examples=120, deadline=None)
@given(seed=st.integers(0, 10**9), n=st.integers(2, 5), name=st.sampled_from(COMBINING),
       chunks=st.integers(1, 2), corruptions=st.integers(0, 2), from_greedy=st.booleans())
def test_fast_sum_check_agrees_with_the_reference(seed: int, n: int, name: str, chunks: int, corruptions: int,
                                                  from_greedy: bool) -> None:
    rng = random.Random(seed)
    topo = _topology(rng, n)
    algo = (_greedy_sum if from_greedy else _sum_schedule)(rng, topo, name, chunks)
    for _ in range(corruptions):
        algo = _corrupt(rng, algo)
    _assert_paths_agree(algo, sum_schedule_is_valid)


def test_sum_generators_give_both_outcomes() -> None:
    outcomes = set()
    for seed in range(40):
        rng = random.Random(seed)
        topo = _topology(rng, 4)
        outcomes.add(_reference_accepts(_sum_schedule(rng, topo, "allreduce", 1)))
        outcomes.add(_reference_accepts(_greedy_sum(rng, topo, "reducescatter", 1)))
    assert outcomes == {True, False}


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 6), k=st.integers(1, 6), data=st.data())
def test_condition_keys_are_the_pairs_of_pre_and_post(n: int, k: int, data: st.DataObject) -> None:
    """Keys read from the placements equal the keys of `pre` / `post` (a rank may hold a chunk at two indices)."""
    triples = st.tuples(st.integers(0, k - 1), st.integers(0, n - 1), st.integers(0, 3))
    ins = data.draw(st.lists(triples, min_size=1, max_size=12))
    outs = data.draw(st.lists(triples, min_size=1, max_size=12))
    try:
        coll = custom_collective("c", n, ins, outs, input_chunks=4, output_chunks=4)
    except CollectiveError:  # two chunks in one slot, or an output chunk nobody holds
        assume(False)
    for placement, sets in ((coll.inputs, coll.pre), (coll.outputs, coll.post)):
        expected = sorted(c * n + r for c, ranks in enumerate(sets) for r in ranks)
        assert condition_keys(placement, n).tolist() == expected


def test_the_copy_check_builds_no_pre_or_post_sets() -> None:
    """The check reads the placements; `pre` and `post` (~0.5 GB of sets at 1024 ranks) stay unbuilt."""
    topo = Topology("ring3", 3, tuple(Link(u, v) for u in range(3) for v in range(3) if u != v))
    coll = make_collective("alltoall", 3, 1)
    sends = tuple(Send(c, c // 3, c % 3) for c in range(9) if c // 3 != c % 3)
    assert copy_schedule_is_valid(Algorithm("direct", topo, coll, (Step(1, sends),), {}))
    assert "pre" not in coll.__dict__ and "post" not in coll.__dict__


def test_index_dtype_narrows_only_where_keys_fit() -> None:
    topo = Topology("pair", 2, (Link(0, 1), Link(1, 0)))
    small = Algorithm("s", topo, make_collective("allgather", 2, 1), (), {})
    assert index_dtype(small) is np.int32
    many_steps = SimpleNamespace(collective=small.collective, topology=topo, steps=range(2**30))  # len() only
    assert index_dtype(many_steps) is np.int64  # type: ignore[arg-type]


def test_a_chunk_beyond_int32_is_a_fault_not_an_overflow() -> None:
    topo = Topology("pair", 2, (Link(0, 1), Link(1, 0)))
    algo = Algorithm("far", topo, make_collective("allgather", 2, 1), (Step(1, (Send(2**40, 0, 1),)),), {})
    assert not copy_schedule_is_valid(algo)
    with pytest.raises(AlgorithmError, match="chunk 1099511627776 outside"):
        verify(algo)
