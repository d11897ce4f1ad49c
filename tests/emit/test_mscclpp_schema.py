"""The plan schema check refuses what the MSCCL++ 0.9.x parser refuses: missing keys, bad indices, limits."""

import copy

import pytest

from collsynth.algorithms.mscclpp import switch_allreduce_plan
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.emit.mscclpp_schema import PlanSchemaError, check_plan
from collsynth.runtime import samples


@pytest.fixture
def plan():
    return ir_to_plan(samples.ring_allreduce(4))


def test_good_plans_pass(plan):
    check_plan(plan)
    check_plan(switch_allreduce_plan(8))


@pytest.mark.parametrize("key", ["name", "collective", "protocol", "inplace", "gpus"])
def test_missing_top_level_key(plan, key):
    del plan[key]
    with pytest.raises(PlanSchemaError, match=f"missing key '{key}'"):
        check_plan(plan)


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p["gpus"][1].update(id=0), "gpus\\[1\\]: id is 0"),
    (lambda p: p["gpus"][0].pop("threadblocks"), "missing key 'threadblocks'"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"].append({"name": "bogus"}), "unknown op 'bogus'"),
    (lambda p: p["gpus"][0]["channels"][0]["connected_to"].append(9), "peer 9 is out of range"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"].__setitem__(
        slice(None), [{"name": "nop"}] * 65), "at most 64"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"].append(
        {"name": "copy", "src_buff": [{"type": "i", "index": 99, "size": 1}], "dst_buff": []}), "outside"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"].append(
        {"name": "signal", "channel_type": "memory", "channel_ids": [0] * 9}), "at most 8"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"].append(
        {"name": "sem_acquire", "semaphore_ids": [99]}), "semaphore id 99"),
])
def test_bad_plans_are_refused_with_one_line(plan, mutate, message):
    bad = copy.deepcopy(plan)
    mutate(bad)
    with pytest.raises(PlanSchemaError, match=message) as info:
        check_plan(bad)
    assert "\n" not in str(info.value)
