"""lower_to_ir keeps the IR's step table made from its own columns (collsynth.ir.table.table_of, fed the values it
stores into the Steps); that table equals the one read back from the IR's Steps, array for array, and the checks
that read it still catch planted faults."""

from dataclasses import fields, replace

import numpy as np
import pytest

from collsynth.algorithms.ring import ring_allreduce
from collsynth.compiler import compile_program
from collsynth.compiler.checks import _in_order
from collsynth.compiler.lowering import LTb, lower_to_ir
from collsynth.ir.table import StepTable, _read, _tables, step_table
from collsynth.ir.validate import IRError, validate
from collsynth.topologies import ring


def nops_form(**options):
    seen = {}
    compile_program(ring_allreduce(ring(4)), after_each=lambda name, form: seen.setdefault(name, form), **options)
    return seen["insert_nops"]


def assert_same(a: StepTable, b: StepTable) -> None:
    for f in fields(StepTable):
        if f.name == "decided":  # what the checks decided from a table, not read from an IR
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert x.dtype == y.dtype and np.array_equal(x, y), f.name


@pytest.mark.parametrize("options", [{}, {"instances": 3}, {"instances": 2, "interleaved_replication": False},
                                     {"pair_threadblocks": False}])
def test_the_lowering_table_equals_the_table_read_from_the_ir(options):
    ir = lower_to_ir(nops_form(**options))
    kept = _tables[id(ir)]
    assert step_table(ir) is kept
    assert_same(kept, _read(ir))


def test_a_column_the_table_refuses_keeps_no_table():
    tbprog = nops_form()
    tb = tbprog.gpus[0][0]
    bad_tb = LTb(tb.send, tb.recv, tb.chan, tb.types, tb.srcbufs, (1.5,) + tb.srcoffs[1:], *(
        getattr(tb, name) for name in ("dstbufs", "dstoffs", "cnts", "deps", "hasdeps", "lines")))
    ir = lower_to_ir(replace(tbprog, gpus=((bad_tb,) + tbprog.gpus[0][1:],) + tbprog.gpus[1:]))
    assert id(ir) not in _tables
    with pytest.raises(TypeError):  # the checks' own read refuses it too: they check step by step
        step_table(ir)


def test_planted_faults_are_still_caught_through_the_lowering_table():
    tbprog = nops_form()
    assert _in_order(lower_to_ir(tbprog))
    # a receive dropped from one threadblock: its connection's counts differ
    g, t = next((g, t) for g, tbs in enumerate(tbprog.gpus) for t, tb in enumerate(tbs) if "r" in tb.types)
    tb = tbprog.gpus[g][t]
    k = tb.types.index("r")
    steps = tb.steps
    short = LTb.of_steps(tb.send, tb.recv, tb.chan, steps[:k] + tuple(s._replace(deps=()) for s in steps[k + 1:]))
    gpus = list(tbprog.gpus)
    gpus[g] = gpus[g][:t] + (short,) + gpus[g][t + 1:]
    ir = lower_to_ir(replace(tbprog, gpus=tuple(gpus)))
    assert id(ir) in _tables
    assert not _in_order(ir)
    # a wrong count in a step: validate's table check and its step loop both see the IR's own values
    wide = LTb.of_steps(tb.send, tb.recv, tb.chan, steps[:k] + (steps[k]._replace(cnt=-1),) + steps[k + 1:])
    gpus[g] = tbprog.gpus[g][:t] + (wide,) + tbprog.gpus[g][t + 1:]
    ir = lower_to_ir(replace(tbprog, gpus=tuple(gpus)))
    assert id(ir) in _tables
    with pytest.raises(IRError, match="cnt"):
        validate(ir)
