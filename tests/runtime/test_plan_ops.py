"""The plan interpreter's ops beyond put/signal/wait: get, res, rre, rres, packet ops (cpkt, rppkt, respkt,
recpkt, recspkt), barrier, relaxed signal/wait -- each in a hand-written AllReduce that must pass, and each
broken the way the executor would go wrong (race, deadlock, unwritten read)."""

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from plan_builders import barrier_plan, packet_allreduce, put_res_allreduce, rre_get_allreduce, rres_allreduce

from collsynth.emit.mscclpp_schema import OP_NAMES, REFUSED_OPS, PlanSchemaError, check_plan
from collsynth.runtime.plan import RACE, execute_plan
from collsynth.runtime.plan_ops import HANDLERS
from collsynth.runtime.result import DEADLOCK, UNWRITTEN_READ

BUILDERS = {
    "rres": rres_allreduce, "rre_get": rre_get_allreduce, "put_res": put_res_allreduce,
    "respkt": lambda n: packet_allreduce(n, "respkt"), "recpkt": lambda n: packet_allreduce(n, "recpkt"),
    "recspkt": lambda n: packet_allreduce(n, "recspkt"), "barrier": barrier_plan,
}


def _names(plan):
    return {op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]}


def test_every_op_the_schema_accepts_has_a_handler_or_is_refused():
    assert set(HANDLERS) | set(REFUSED_OPS) == OP_NAMES
    exercised = set().union(*(_names(build(3)) for build in BUILDERS.values()), _names(rres_allreduce(3, True)))
    assert {"get", "res", "rre", "rres", "cpkt", "rppkt", "respkt", "recpkt", "recspkt", "upkt", "ppkt", "barrier",
            "rlxsignal", "rlxwait", "copy", "put", "re"} <= exercised


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(BUILDERS)), st.integers(2, 8), st.sampled_from(["float32", "float16", "int32"]),
       st.sampled_from(["sum", "max"]), st.integers(0, 1000))
def test_hand_written_plans_pass(builder, n, dtype, op, seed):
    result = execute_plan(BUILDERS[builder](n), dtype=dtype, op=op, seed=seed)
    assert result.passed, str(result)


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(BUILDERS)), st.integers(2, 6), st.data())
def test_removing_a_signal_deadlocks_and_never_hangs(builder, n, data):
    plan = copy.deepcopy(BUILDERS[builder](n))
    where = [(g, t, k) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"])
             for k, op in enumerate(tb["ops"]) if op["name"] == "signal"]
    if not where:
        return
    g, t, k = data.draw(st.sampled_from(where))
    del plan["gpus"][g]["threadblocks"][t]["ops"][k]
    result = execute_plan(plan)
    assert not result.passed and result.failure == DEADLOCK


@settings(max_examples=20, deadline=None)
@given(st.sampled_from(sorted(BUILDERS)), st.integers(2, 6), st.data())
def test_dropping_any_op_is_a_result_not_an_exception(builder, n, data):
    plan = copy.deepcopy(BUILDERS[builder](n))
    where = [(g, t, k) for g, gpu in enumerate(plan["gpus"]) for t, tb in enumerate(gpu["threadblocks"])
             for k in range(len(tb["ops"]))]
    g, t, k = data.draw(st.sampled_from(where))
    del plan["gpus"][g]["threadblocks"][t]["ops"][k]
    result = execute_plan(plan)
    assert result.passed or result.failure


@pytest.mark.parametrize("n", [2, 4, 8])
def test_a_read_guarded_only_by_relaxed_signals_is_a_race(n):
    result = execute_plan(rres_allreduce(n, relaxed=True))
    assert not result.passed and result.failure == RACE


def test_reading_a_peer_before_any_signal_is_a_race():
    result = execute_plan(rres_allreduce(4, first_sync=False))
    assert not result.passed and result.failure == RACE and "rres" in result.message


def test_a_barrier_orders_threadblocks_and_a_missing_arrival_deadlocks():
    assert execute_plan(barrier_plan(4)).passed
    unordered = execute_plan(barrier_plan(4, with_barrier=False))
    assert not unordered.passed and unordered.failure in (RACE, UNWRITTEN_READ)
    alone = execute_plan(barrier_plan(4, tb0_barrier=False))
    assert not alone.passed and alone.failure == DEADLOCK and "barrier" in alone.message


def test_packets_read_before_they_arrive_block_instead_of_reading_garbage():
    plan = packet_allreduce(3, "respkt")
    for gpu in plan["gpus"]:  # rank r no longer sends packets to anyone: every respkt waits forever
        gpu["threadblocks"][0]["ops"] = [op for op in gpu["threadblocks"][0]["ops"] if op["name"] != "ppkt"]
    result = execute_plan(plan)
    assert not result.passed and result.failure == DEADLOCK and "respkt" in result.message


@pytest.mark.parametrize("mutate, words", [
    (lambda op: op.update(name="pipeline", iter_context={"unit_size": 1024, "num_chunks": 1}, ops=[]), "pipeline"),
    (lambda op: op.update(tbg_info={"tb_id": 0, "tbg_size": 2}), "tbg_info"),
    (lambda op: op.update(name="barrier", barrier_id=16, num_threadblocks=1), "barrier_id"),
    (lambda op: op.update(name="barrier", barrier_id=0, num_threadblocks=3), "num_threadblocks"),
])
def test_schema_refuses_what_the_interpreter_cannot_check(mutate, words):
    plan = barrier_plan(2)
    mutate(plan["gpus"][1]["threadblocks"][0]["ops"][0])
    with pytest.raises(PlanSchemaError, match=words) as info:
        check_plan(plan)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("field", ["src_buff", "dst_buff", "semaphore_ids"])
def test_an_op_missing_what_it_reads_is_a_layout_failure_not_a_crash(field):
    plan = barrier_plan(2)
    ops = plan["gpus"][0]["threadblocks"][1]["ops"]
    target = next(op for op in ops if op["name"] == "re")
    if field == "semaphore_ids":
        target.clear()
        target["name"] = "sem_acquire"
    else:
        del target[field]
    result = execute_plan(plan)
    assert not result.passed and result.failure == "layout" and "\n" not in result.message
    assert ("(sem_acquire)" if field == "semaphore_ids" else "(re)") in result.message
