"""The schedule transforms (each exists once): chunk splitting, scaling, concatenation, reversal into a reduction."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import custom_collective, make_collective
from collsynth.compiler.lowering import instance_collective
from collsynth.core.enums import Op
from collsynth.schedule import (
    Algorithm,
    AlgorithmError,
    Send,
    Step,
    concatenate,
    reversed_into_reduction,
    scaled,
    verify,
)
from collsynth.topologies import ring
from collsynth.topologies.symmetry import reversed_topology


def ring_allgather(n: int) -> Algorithm:
    """Every rank forwards, step by step, what it received from its left neighbour (ring:n has both directions)."""
    steps = tuple(Step(1, tuple(Send((r - t) % n, r, (r + 1) % n) for r in range(n))) for t in range(n - 1))
    return Algorithm(f"ring-ag-{n}", ring(n), make_collective("allgather", n), steps)


@given(n=st.integers(2, 7), factor=st.integers(1, 4))
@settings(max_examples=25, deadline=None)
def test_scaled_keeps_rounds_per_chunk_and_verifies(n, factor):
    algorithm = ring_allgather(n)
    verify(algorithm)
    bigger = scaled(algorithm, factor)
    assert (bigger.chunks, bigger.num_steps, bigger.rounds) == (factor, n - 1, factor * (n - 1))
    assert bigger.bandwidth_cost == algorithm.bandwidth_cost
    assert bigger.collective == algorithm.collective.split(factor)


@given(n=st.integers(2, 7))
@settings(max_examples=10, deadline=None)
def test_reversal_turns_allgather_into_reducescatter(n):
    dual = ring_allgather(n)
    # a ring's reverse is a ring: the AllGather on the reversed topology is this one, relabelled
    reverse = Algorithm(dual.name, reversed_topology(dual.topology), dual.collective, dual.steps)
    reduction = reversed_into_reduction(reverse, ring(n), make_collective("reducescatter", n), "rs")
    verify(reduction)
    assert {s.op for _, s in reduction.sends()} == {Op.REDUCE}
    assert reduction.rounds == dual.rounds and reduction.num_steps == dual.num_steps


def test_reversal_checks_what_it_builds():
    broken = Algorithm("half", ring(4), make_collective("allgather", 4), ring_allgather(4).steps[:1])
    with pytest.raises(AlgorithmError, match="postcondition"):
        reversed_into_reduction(broken, ring(4), make_collective("reducescatter", 4))


def test_concatenate_reducescatter_then_allgather_is_allreduce():
    n = 4
    rs = reversed_into_reduction(ring_allgather(n), ring(n), make_collective("reducescatter", n))
    ar = concatenate("ar", rs, ring_allgather(n), make_collective("allreduce", n), {})
    verify(ar)
    assert ar.num_steps == 2 * (n - 1)
    with pytest.raises(AlgorithmError):
        concatenate("ag-twice", ring_allgather(n), ring_allgather(n), make_collective("allreduce", n), {})


@given(k=st.integers(1, 4), chunks=st.integers(1, 3), name=st.sampled_from(["allgather", "alltoall", "reduce"]))
@settings(max_examples=30, deadline=None)
def test_split_is_the_compilers_instance_split(k, chunks, name):
    coll = make_collective(name, 4, chunks, root=1 if name == "reduce" else None)
    assert instance_collective(coll, k) == coll.split(k)
    assert coll.split(k).chunks == chunks * k


def test_split_of_a_custom_collective_places_pieces_next_to_each_other():
    coll = custom_collective("next", 3, [(0, 0, 0), (1, 1, 0)], [(0, 1, 0), (1, 2, 0)])
    two = coll.split(2)
    assert two.num_chunks == 4 and two.inputs == ((0, 0, 0), (1, 0, 1), (2, 1, 0), (3, 1, 1))
    assert two.pre[1] == frozenset({0}) and two.post[3] == frozenset({2})
    assert instance_collective(coll, 2) == two
    with pytest.raises(Exception, match="factor"):
        coll.split(0)
