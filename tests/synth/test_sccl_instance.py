"""synthesize_instance, least_steps and the combining-collective plumbing (duals, composition, scaling)."""

import pickle
from fractions import Fraction

import pytest

from collsynth.collectives import custom_collective, make_collective
from collsynth.core.enums import Status
from collsynth.core.errors import CollsynthError
from collsynth.schedule import Algorithm, SynthesisResult, scaled, verify
from collsynth.synth.instance import synthesize_instance
from collsynth.synth.least_steps import least_steps
from collsynth.synth.problem import strategy
from collsynth.topologies import dgx1, line, ring


def test_instance_sat_with_rounds_limit():
    result = synthesize_instance(dgx1(), make_collective("allgather", 8, 2), 2, 3, time_limit=60)
    assert isinstance(result, SynthesisResult) and result.status == Status.SAT  # asked "<= 3", not the fewest
    assert (result.algorithm.num_steps, result.algorithm.rounds, result.algorithm.chunks) == (2, 3, 2)
    verify(result.algorithm)
    assert result.algorithm.provenance["synthesizer"] == "collsynth sccl-z3"


def test_instance_unsat():
    result = synthesize_instance(dgx1(), make_collective("allgather", 8, 3), 2, 4, time_limit=60)
    assert result.status == "unsat" and result.algorithm is None
    assert [(a.steps, a.rounds, a.result) for a in result.tried] == [(2, 4, "unsat")]


def test_instance_fewest_rounds_without_a_limit():
    result = synthesize_instance(ring(8), make_collective("allgather", 8, 2), 4, time_limit=60)
    assert result.status == Status.OPTIMAL and result.algorithm.rounds == 7 and result.bound == 7


def test_instance_timeout_is_reported_as_timeout():
    result = synthesize_instance(dgx1(), make_collective("alltoall", 8, 8), 3, 21, time_limit=0.05)
    assert result.status == "timeout" and result.algorithm is None


@pytest.mark.parametrize("name", ["reduce", "reducescatter"])
def test_combining_instances_reverse_their_dual(name):
    coll = make_collective(name, 8, 2, root=3 if name == "reduce" else None)
    result = synthesize_instance(dgx1(), coll, 3, time_limit=60)
    assert result.found
    verify(result.algorithm)
    assert {s.op for _, s in result.algorithm.sends()} == {"reduce"}


def test_allreduce_instance_composes_then_tries_directly():
    result = synthesize_instance(ring(4), make_collective("allreduce", 4), 4, time_limit=60)
    verify(result.algorithm)
    assert result.status == Status.OPTIMAL
    # three steps: only the direct encoding can do it
    direct = synthesize_instance(ring(4), make_collective("allreduce", 4), 3, time_limit=60)
    assert direct.found and direct.algorithm.rounds == 3
    verify(direct.algorithm)
    assert synthesize_instance(line(4), make_collective("allreduce", 4), 2, time_limit=60).status == "unsat"


def test_least_steps():
    result = least_steps(ring(8), make_collective("allgather", 8), time_limit=60)
    assert (result.status, result.algorithm.num_steps, result.algorithm.rounds) == (Status.OPTIMAL, 4, 4)
    assert result.steps_bound == 4
    limited = least_steps(ring(4), make_collective("allgather", 4, 2), rounds=3, time_limit=60)
    assert limited.status == Status.SAT and limited.algorithm.rounds <= 3 and limited.algorithm.num_steps == 2


def test_least_steps_bad_max_steps():
    with pytest.raises(CollsynthError, match="max_steps"):
        least_steps(ring(8), make_collective("allgather", 8), max_steps=2)


def test_bad_steps_and_rounds():
    with pytest.raises(CollsynthError, match="steps"):
        synthesize_instance(ring(4), make_collective("allgather", 4), 0)
    with pytest.raises(CollsynthError, match="rounds"):
        synthesize_instance(ring(4), make_collective("allgather", 4), 2, 0)


def test_custom_combining_collective_is_refused():
    coll = custom_collective("sum2", 2, [(0, 0, 0), (0, 1, 0)], [(0, 1, 0)], combining=True)
    with pytest.raises(CollsynthError, match="custom combining"):
        strategy(coll)


def test_custom_collectives_split_into_pieces():
    coll = custom_collective("next", 3, [(0, 0, 0), (1, 1, 0)], [(0, 1, 0), (1, 2, 0)])
    two = coll.split(2)
    assert two.num_chunks == 4 and two.pre[1] == frozenset({0}) and two.post[3] == frozenset({2})
    result = synthesize_instance(line(3), two, 1, time_limit=60)
    assert result.found and result.algorithm.rounds == 2
    verify(result.algorithm)


def test_scaled_algorithm_keeps_rounds_per_chunk():
    result = synthesize_instance(dgx1(), make_collective("allgather", 8, 2), 2, 3, time_limit=60)
    bigger = scaled(result.algorithm, 3)
    verify(bigger)
    assert (bigger.chunks, bigger.num_steps, bigger.rounds) == (6, 2, 9)
    assert bigger.bandwidth_cost == Fraction(3, 2)


def test_collectives_cross_processes_with_their_root():
    coll = make_collective("broadcast", 8, 3, root=5)
    assert pickle.loads(pickle.dumps(coll)) == coll
    custom = custom_collective("next", 3, [(0, 0, 0)], [(0, 1, 0)]).split(2)
    assert pickle.loads(pickle.dumps(custom)).post == custom.post


def test_algorithm_json_round_trip():
    result = synthesize_instance(ring(4), make_collective("allgather", 4, 2), 2, time_limit=60)
    again = Algorithm.from_json(result.algorithm.to_json())
    verify(again)
    assert again.steps == result.algorithm.steps
