"""collsynth.ir.table: the step table holds every field of every step, in (gpu, tb, step) order; it is kept only
when asked, and only while its IR lives."""

import gc
from dataclasses import replace

import numpy as np
import pytest

from collsynth.ir import BUFFERS, STEP_TYPES
from collsynth.ir.table import _int_column, _ints, _tables, forget_table, step_table
from collsynth.runtime import samples

SAMPLES = (samples.allreduce_via_scratch(3), samples.ring_allreduce(5, channels=3), samples.pairwise_alltoall(4))


@pytest.mark.parametrize("ir", SAMPLES)
def test_the_table_holds_every_field_of_every_step(ir):
    t = step_table(ir)
    rows = [(g, tb, step) for g, gpu in enumerate(ir.gpus) for tb in gpu.tbs for step in tb.steps]
    assert t.s.size == len(rows)
    assert t.tb_gpu[t.step_tb].tolist() == [g for g, _, _ in rows]
    assert t.tb_id[t.step_tb].tolist() == [tb.id for _, tb, _ in rows]
    assert t.tb_send[t.step_tb].tolist() == [tb.send for _, tb, _ in rows]
    assert t.index.tolist() == [tb.steps.index(step) for _, tb, step in rows]
    for name in ("s", "srcoff", "dstoff", "cnt", "depid", "deps", "hasdep"):
        assert getattr(t, name).tolist() == [getattr(step, name) for _, _, step in rows], name
    assert [STEP_TYPES[c] for c in t.type] == [step.type for _, _, step in rows]
    assert [BUFFERS[c] for c in t.srcbuf] == [step.srcbuf for _, _, step in rows]
    assert [BUFFERS[c] for c in t.dstbuf] == [step.dstbuf for _, _, step in rows]


def test_a_field_that_is_no_integer_is_refused_not_rounded():
    ir = samples.ring_allreduce(3)
    gpu = ir.gpus[0]
    tb = gpu.tbs[0]
    bad = replace(ir, gpus=(replace(gpu, tbs=(replace(tb, steps=(replace(tb.steps[0], srcoff=1.5),) + tb.steps[1:]),)
                                               + gpu.tbs[1:]),) + ir.gpus[1:])
    with pytest.raises(TypeError):
        step_table(bad)


def test_unknown_types_and_buffers_get_code_minus_one():
    ir = samples.ring_allreduce(3)
    gpu = ir.gpus[0]
    tb = gpu.tbs[0]
    odd = replace(tb.steps[0], type="bogus", dstbuf="x")
    bad = replace(ir, gpus=(replace(gpu, tbs=(replace(tb, steps=(odd,) + tb.steps[1:]),) + gpu.tbs[1:]),)
                  + ir.gpus[1:])
    t = step_table(bad)
    assert t.type[0] == -1 and t.dstbuf[0] == -1 and np.all(t.type[1:] >= 0)


def test_a_table_is_kept_only_when_asked_and_not_past_its_ir():
    ir = samples.ring_allreduce(4)
    step_table(ir)
    assert id(ir) not in _tables
    kept = step_table(ir, keep=True)
    assert step_table(ir) is kept
    forget_table(ir)
    assert id(ir) not in _tables
    step_table(ir, keep=True)
    key = id(ir)
    del ir
    gc.collect()
    assert key not in _tables


@pytest.mark.parametrize("values", [
    [3, 0, -1], [True, 2, False], [np.int32(4), 5], [], [2**63 - 1, -(2**63)],
    [1.0, 2], [1.5], ["3", 1], [None, 1], [2**63], [2**63, -1], [2**70], [(1, 2), (3, 4)], [[1], 2], [np.float64(2)],
])
def test_a_column_is_read_at_once_exactly_as_value_by_value(values):
    """`_int_column` (numpy reads a batch of values at once) gives `_ints`' array (operator.index per value), or
    refuses where it refuses."""
    def outcome(read):
        try:
            array = read(values, len(values))
        except (TypeError, ValueError, OverflowError):
            return "refused"
        assert array.dtype == np.int64
        return array.tolist()

    assert outcome(_int_column) == outcome(_ints)
