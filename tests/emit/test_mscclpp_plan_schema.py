"""The declared MSCCL++ plan schema (collsynth/emit/mscclpp_plan_schema.py): exact types, unknown keys refused
with the closest known key, and any value anywhere in a plan either passes or is refused in one line."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collsynth.algorithms.mscclpp import switch_allreduce_plan
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.emit.mscclpp_schema import PlanSchemaError, check_plan
from collsynth.runtime import samples

PLAN = ir_to_plan(samples.ring_allreduce(4))


def _refused(mutate) -> str:
    plan = copy.deepcopy(PLAN)
    mutate(plan)
    with pytest.raises(PlanSchemaError) as info:
        check_plan(plan)
    assert "\n" not in str(info.value)
    return str(info.value)


@pytest.mark.parametrize(("mutate", "words"), [
    (lambda p: p.update(inplce=False), "plan: unknown key 'inplce'"),
    (lambda p: p["gpus"][0].update(scratch_chunk=0), "did you mean 'scratch_chunks'?"),
    (lambda p: p["gpus"][0]["threadblocks"][0].update(remote_buffer_ref=[]), "did you mean 'remote_buffer_refs'?"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"][0].update(chanel_ids=[0]), "did you mean 'channel_ids'?"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"][0]["src_buff"][0].update(idx=0), "did you mean 'index'?"),
])
def test_an_unknown_key_names_the_closest_known_one(mutate, words):
    message = _refused(mutate)
    assert words in message and "does not read it" in message


@pytest.mark.parametrize(("mutate", "words"), [
    # no string-to-number, no float-to-int, a bool is not a rank
    (lambda p: p["gpus"][0].update(input_chunks="4"), "gpus[0].input_chunks: input should be a valid integer"),
    (lambda p: p["gpus"][0].update(input_chunks=4.0), "gpus[0].input_chunks: input should be a valid integer"),
    (lambda p: p["gpus"][0].update(id=True), "gpus[0].id: input should be a valid integer"),
    (lambda p: p.update(inplace="no"), "plan.inplace: input should be a valid boolean"),
    (lambda p: p["gpus"][0]["remote_buffers"].append({"rank": 1, "type": "x", "access_channel_types": []}),
     "remote_buffers[2].type: input should be 'i', 'o' or 's'"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"][0].update(channel_type="nvlink"), "ops[0].channel_type: input"),
    (lambda p: p["gpus"][0]["threadblocks"][0]["ops"][0]["src_buff"][0].update(size=0),
     "src_buff[0].size: input should be greater than or equal to 1"),
    (lambda p: p.update(num_threads_per_block=2048),
     "plan.num_threads_per_block: input should be less than or equal to 1024"),
    (lambda p: p["gpus"][0].update(semaphores=[{"init_value": 0}] * 17), "at most 16 per GPU"),
])
def test_types_and_fixed_limits_are_exact(mutate, words):
    assert words in _refused(mutate)


def test_the_plans_collsynth_writes_and_reads_pass():
    check_plan(PLAN)
    check_plan(switch_allreduce_plan(8))
    check_plan(json.loads(json.dumps(PLAN)))  # as read back from its JSON file
    check_plan({**PLAN, "collsynth": {"root": 0}})


def _paths(value, prefix=()):
    """Every (path, value) in a JSON document."""
    yield prefix, value
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*prefix, i))


PATHS = [path for path, _ in _paths(PLAN) if path]
JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 70) | st.floats(allow_nan=True)
                           | st.text(max_size=4), lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.sampled_from(["id", "name", "type", "index", "x"]), inner, max_size=3),
                           max_leaves=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(PATHS), value=JSON_VALUES)
def test_any_value_anywhere_passes_or_is_refused_in_one_line(path, value):
    plan = copy.deepcopy(PLAN)
    target = plan
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    try:
        check_plan(plan)
    except PlanSchemaError as exc:
        assert "\n" not in str(exc) and str(exc)
