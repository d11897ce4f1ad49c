"""The native DSL (ProgramBuilder / ChunkRef), the Program contract, and symbolic execution."""

import inspect

import numpy as np
import pytest

from collsynth.collectives import alltonext, make_collective
from collsynth.language import (
    Buffer,
    ChunkOp,
    Program,
    ProgramBuilder,
    ProgramError,
    Slot,
    check_postcondition,
    evaluate,
    run_symbolic,
)
from collsynth.language.program import alias_slot, validate_program
from collsynth.topologies import fully_connected, line, ring


def _line_of(marker: str) -> int:
    """The line number in this file of the (unique) source line containing `marker`."""
    source, _ = inspect.getsourcelines(inspect.getmodule(_line_of))
    hits = [k for k, text in enumerate(source, start=1) if marker in text and "_line_of" not in text]
    assert len(hits) == 1, hits
    return hits[0]


def ring_allgather(n: int) -> Program:
    b = ProgramBuilder("ring_ag", ring(n), make_collective("allgather", n))
    for r in range(n):
        c = b.chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        for hop in range(1, n):
            c = c.copy((r + hop) % n, Buffer.output, r)
    return b.build()


def test_builder_traces_ops_in_order_with_hints_and_lines():
    b = ProgramBuilder("p", ring(3), make_collective("allgather", 3))
    c = b.chunk(0, Buffer.input, 0)
    d = c.copy(1, Buffer.output, 0, sendtb=2, recvtb=-1, ch=1)  # marker:copy-hints
    prog = b.build()
    assert isinstance(d.slot, Slot) and d.slot == Slot(1, "output", 0, 1)
    (op,) = prog.ops
    assert op == ChunkOp("copy", Slot(0, "input", 0), Slot(1, "output", 0), sendtb=2, recvtb=None, channel=1,
                         line=_line_of("marker:copy-hints"))
    assert op.file.endswith("test_dsl_builder.py")
    assert prog.buffers == ((), (), ())


def test_program_str_is_one_op_per_line():
    prog = ring_allgather(3)
    text = str(prog)
    lines = text.splitlines()
    assert lines[0].startswith("program 'ring_ag': allgather(ranks=3, chunks=1) on ring:3")
    assert len(lines) == 1 + len(prog.ops) == 1 + 9
    assert "r1.output[0] := r0.output[0]" in text


def test_symbolic_execution_checks_the_postcondition():
    prog = ring_allgather(4)
    assert check_postcondition(run_symbolic(prog)) == []
    # Drop the last hop: rank 2 never gets chunk 3 -> a precise complaint.
    broken = Program(prog.name, prog.topology, prog.collective, ops=prog.ops[:-1])
    (problem,) = check_postcondition(run_symbolic(broken))
    assert problem == "rank 2 output[3] should hold chunk 3 but holds nothing"


def test_reduction_contents_are_multisets():
    coll = make_collective("allreduce", 2)
    b = ProgramBuilder("ar", line(2), coll)
    a = b.chunk(0, Buffer.input, 0)
    b.chunk(1, Buffer.input, 0).reduce(a)
    b.chunk(1, Buffer.input, 0).reduce(b.chunk(0, Buffer.input, 0))  # rank 0's addend counted twice
    state = b.state
    assert state.content(1, "input", 0) == (0, 0, 2)  # contribution ids: rank * input_chunks + index
    assert "sum(r0.input[0], r0.input[0], r1.input[0])" in state.describe(state.content(1, "input", 0))
    inputs = [np.array([[1.0], [10.0]]), np.array([[100.0], [1000.0]])]
    (values0, written0), (values1, written1) = evaluate(state, inputs, buffer="input")
    assert values1[:, 0].tolist() == [102.0, 1000.0] and values0[:, 0].tolist() == [1.0, 10.0]
    assert written0.all() and written1.all()


def test_stale_reference_names_the_line():
    b = ProgramBuilder("p", fully_connected(3), make_collective("allgather", 3))
    early = b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)  # marker:taken
    b.chunk(2, Buffer.input, 0).copy(1, Buffer.output, 0)  # marker:overwrite
    with pytest.raises(ProgramError) as err:
        early.copy(2, Buffer.output, 0)  # marker:stale-use
    msg = str(err.value)
    assert msg.startswith(f"test_dsl_builder.py:{_line_of('marker:stale-use')}: stale reference")
    assert f"overwritten at line {_line_of('marker:overwrite')}" in msg
    assert f"taken at line {_line_of('marker:taken')}" in msg


def test_reduce_keeps_the_written_reference_valid_and_returns_it():
    b = ProgramBuilder("p", ring(3), make_collective("allreduce", 3))
    acc = b.chunk(1, Buffer.input, 0)
    same = acc.reduce(b.chunk(0, Buffer.input, 0))
    assert same is acc
    acc.copy(2, Buffer.output, 0)  # still fresh after writing through it


def test_reading_unwritten_data_is_refused_with_the_line():
    b = ProgramBuilder("p", ring(3), make_collective("allgather", 3))
    with pytest.raises(ProgramError, match=rf":{_line_of('marker:unwritten')}: chunk\(1, output, 2\) reads rank 1 "
                                           r"output\[2\], which nobody wrote"):
        b.chunk(1, Buffer.output, 2)  # marker:unwritten


def test_missing_link_is_refused_with_the_line():
    b = ProgramBuilder("p", line(3), make_collective("allgather", 3))
    c = b.chunk(0, Buffer.input, 0)
    with pytest.raises(ProgramError, match=rf":{_line_of('marker:nolink')}: no link from rank 0 to rank 2 in "
                                           "topology line:3"):
        c.copy(2, Buffer.output, 0)  # marker:nolink


@pytest.mark.parametrize("call, message", [
    (lambda b: b.chunk(5, Buffer.input, 0), "rank 5 is outside 0..2"),
    (lambda b: b.chunk(0, Buffer.input, 1), r"input\[1:2\] is outside rank 0's input buffer \(1 chunks"),
    (lambda b: b.chunk(0, "tmp", 0), "scratch buffer 'tmp' has 0 chunks"),
    (lambda b: b.chunk(0, Buffer.input, 0).copy(1, Buffer.output), "give the index to write"),
    (lambda b: b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, ch=-3), r"ch=-3: hints are integers >= 0"),
    (lambda b: b.chunk(0, Buffer.input, 0).split(2), "cannot split"),
])
def test_bad_calls_are_one_line_errors(call, message):
    b = ProgramBuilder("p", fully_connected(3), make_collective("allgather", 3))
    with pytest.raises(ProgramError, match=message) as err:
        call(b)
    assert "\n" not in str(err.value)


def test_scratch_buffers_append_and_split_group():
    b = ProgramBuilder("p", fully_connected(2), make_collective("allreduce", 2, 2))
    whole = b.chunk(0, Buffer.input, 0, 4)
    lo, hi = whole.split(2)
    assert (lo.index, lo.size, hi.index, hi.size) == (0, 2, 2, 2)
    first = lo.copy(1, "tmp")  # appends at index 0
    second = hi.copy(1, "tmp")  # appends after it
    assert (first.index, second.index, second.buffer) == (0, 2, "tmp")
    both = first.group(second)
    assert (both.index, both.size) == (0, 4)
    b.chunk(1, Buffer.input, 0, 4).reduce(both)
    prog = b.build()
    assert prog.buffers == ((), (("tmp", 4),))
    assert prog.scratch_offsets(1) == {"tmp": 0}


def test_inplace_aliasing_follows_mscclang():
    ag = make_collective("allgather", 4, 2, inplace=True)
    assert alias_slot(ag, 3, "input", 1) == ("output", 7)
    ar = make_collective("allreduce", 4, inplace=True)
    assert alias_slot(ar, 2, "output", 3) == ("input", 3)
    rs = make_collective("reducescatter", 4, 2, inplace=True)
    assert alias_slot(rs, 1, "output", 1) == ("input", 3)
    b = ProgramBuilder("p", fully_connected(4), ag)
    ref = b.chunk(3, Buffer.input, 1)
    assert (ref.buffer, ref.index) == (Buffer.output, 7)
    assert ref.copy(3, Buffer.output, 7) is ref  # copying onto its own (aliased) slot is a no-op
    assert b.build().ops == ()


def test_chunk_metadata_for_alltoall():
    b = ProgramBuilder("p", fully_connected(3), make_collective("alltoall", 3, 2))
    c = b.chunk(1, Buffer.input, 5)  # rank 1's chunk 1 for rank 2
    assert (c.get_origin_rank(), c.get_origin_index()) == (1, 5)
    assert (c.get_dst_rank(), c.get_dst_index()) == (2, 3)


def test_custom_collective_alltonext():
    coll = alltonext(3)
    b = ProgramBuilder("a2n", line(3), coll)
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
    assert b.check() == ["rank 2 output[0] should hold chunk 1 but holds nothing"]
    b.chunk(1, Buffer.input, 0).copy(2, Buffer.output, 0)
    assert b.check() == []


def test_two_builders_side_by_side():
    one = ProgramBuilder("one", ring(2), make_collective("allgather", 2))
    two = ProgramBuilder("two", ring(3), make_collective("allgather", 3))
    one.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
    two.chunk(2, Buffer.input, 0).copy(0, Buffer.output, 2)
    assert len(one.build().ops) == len(two.build().ops) == 1
    assert one.build().ops[0].src.rank == 0 and two.build().ops[0].src.rank == 2


def test_validate_program_checks_lowered_programs():
    coll = make_collective("allgather", 3)
    bad = Program("lowered", line(3), coll, ops=(ChunkOp("copy", Slot(0, "input", 0), Slot(2, "output", 0)),))
    with pytest.raises(ProgramError, match="no link from rank 0 to rank 2"):
        validate_program(bad)
    with pytest.raises(ProgramError, match="protocol must be one of"):
        Program("x", line(3), coll, protocol="Fast")
    with pytest.raises(ProgramError, match="collective has 4 ranks but topology line:3 has 3"):
        Program("x", line(3), make_collective("allgather", 4))
