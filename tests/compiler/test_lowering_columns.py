"""A threadblock program's threadblocks are columns (LTb): `steps` reads them back as LSteps and `of_steps` makes
the same threadblock from them; the IR's steps are those LSteps, field for field."""

import pytest

from collsynth.algorithms.ring import ring_allreduce
from collsynth.compiler import compile_program
from collsynth.compiler.lowering import LTb, TbProgram
from collsynth.topologies import ring


def forms(**options):
    seen = {}
    ir = compile_program(ring_allreduce(ring(4)), after_each=lambda name, form: seen.setdefault(name, form),
                         **options)
    return seen["insert_nops"], ir


@pytest.mark.parametrize("instances", [1, 3])
def test_columns_read_back_as_the_irs_steps(instances):
    tbprog, ir = forms(instances=instances)
    assert isinstance(tbprog, TbProgram)
    for tbs, gpu in zip(tbprog.gpus, ir.gpus, strict=True):
        for tb, irtb in zip(tbs, gpu.tbs, strict=True):
            assert LTb.of_steps(tb.send, tb.recv, tb.chan, tb.steps) == tb
            assert [(st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, st.hasdep) for st in tb.steps] == \
                [(st.type, st.srcbuf, st.srcoff, st.dstbuf, st.dstoff, st.cnt, st.hasdep) for st in irtb.steps]
            assert [st.deps[0] if st.deps else (-1, -1) for st in tb.steps] == [(st.depid, st.deps)
                                                                                for st in irtb.steps]


def test_an_empty_threadblock_has_empty_columns():
    tb = LTb.of_steps(1, -1, 0, ())
    assert tb.steps == () and tb.types == () and tb.lines == ()
