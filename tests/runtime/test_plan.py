"""The plan interpreter: runs correct plans to PASS and reports deadlocks, races, unflushed DMAs and wrong
results instead of hanging or passing."""

import copy

from hypothesis import given, settings
from hypothesis import strategies as st
from plan_builders import ll_allreduce_with_stash

from collsynth.algorithms.mscclpp import switch_allreduce_plan
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.runtime import samples
from collsynth.runtime.plan import RACE, execute_plan
from collsynth.runtime.result import DEADLOCK, MISMATCH
from collsynth.topologies.io import resolve_topology


def _ops(plan):
    return [(g, t, k, op) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"])
            for k, op in enumerate(tb["ops"])]


def _remove_first(plan, name):
    bad = copy.deepcopy(plan)
    g, t, k, _ = next(x for x in _ops(bad) if x[3]["name"] == name)
    del bad["gpus"][g]["threadblocks"][t]["ops"][k]
    return bad


def test_correct_plan_passes():
    result = execute_plan(ir_to_plan(samples.ring_allgather(4)), nbytes=4096)
    assert result.passed and result.backend == "mscclpp-plan"


def test_missing_signal_is_a_deadlock_not_a_hang():
    result = execute_plan(_remove_first(ir_to_plan(samples.ring_allgather(4)), "signal"))
    assert not result.passed and result.failure == DEADLOCK
    assert "wait" in result.message


def test_read_before_wait_is_a_race():
    plan = ir_to_plan(samples.ring_allreduce(4))
    bad = copy.deepcopy(plan)
    # swap a wait with the reduce that reads what the put wrote, on the last rank (it runs after its sender put)
    for gpu in reversed(bad["gpus"]):
        for tb in gpu["threadblocks"]:
            ops = tb["ops"]
            for k in range(len(ops) - 1):
                if ops[k]["name"] == "wait" and ops[k + 1]["name"] == "re":
                    ops[k], ops[k + 1] = ops[k + 1], ops[k]
                    result = execute_plan(bad)
                    assert not result.passed and result.failure == RACE
                    return
    raise AssertionError("no wait followed by a reduce in the ring plan")


def test_unflushed_port_put_is_reported():
    topology = resolve_topology("2xndv4")
    from collsynth.algorithms import library_programs
    from collsynth.compiler import compile_program
    program = dict(library_programs(topology, "allreduce"))["hierarchical_allreduce"]
    plan = ir_to_plan(compile_program(program), topology)
    bad = copy.deepcopy(plan)
    for gpu in bad["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [dict(op, name="pws") if op["name"] == "pwsf" else op for op in tb["ops"]]
    result = execute_plan(bad)
    assert not result.passed and result.failure == RACE
    assert "flush" in result.message


def test_wrong_chunk_is_a_mismatch():
    bad = _remove_first(switch_allreduce_plan(4), "glres")  # chunk 0 is never reduced
    result = execute_plan(bad)
    assert not result.passed and result.failure == MISMATCH


@settings(max_examples=12, deadline=None)
@given(st.integers(2, 12), st.sampled_from(["float32", "float16", "int32"]), st.sampled_from(["sum", "max"]),
       st.integers(0, 1000))
def test_switch_allreduce_plan_passes_for_any_size(n, dtype, op, seed):
    result = execute_plan(switch_allreduce_plan(n), nbytes=n * 64 * 4, dtype=dtype, op=op, seed=seed)
    assert result.passed, str(result)


@settings(max_examples=8, deadline=None)
@given(st.integers(2, 8), st.integers(0, 100))
def test_lowered_samples_pass_for_any_rank_count(n, seed):
    for ir in (samples.ring_allgather(n), samples.ring_allreduce(n)):
        assert execute_plan(ir_to_plan(ir), seed=seed).passed


def test_packet_offsets_are_doubled_so_plain_data_and_packets_meet_by_bytes_not_by_index():
    """MSCCL++'s executor places packets of chunk index i at byte offset 2 * i * chunk (execution_kernel's
    packet handlers shift their offsets left by one) and plain data at i * chunk, in one scratch space."""
    same_index = execute_plan(ll_allreduce_with_stash(1), nbytes=4096)
    assert same_index.passed, same_index  # plain chunk 1 is bytes [1, 2); packets at index 1 are bytes [2, 4)
    inside = execute_plan(ll_allreduce_with_stash(2), nbytes=4096)
    assert not inside.passed and inside.failure == RACE and "packets" in inside.message
