"""trace_to_dag by arrays (compiler/tracing.py) makes the very records the trace's loop makes, and the columns it
leaves in the DAG's cache are those the DAG would compute from its records."""

from dataclasses import replace

import numpy as np
import pytest

import collsynth.compiler.dag as dag_module
from collsynth.algorithms.registry import library_programs
from collsynth.collectives import make_collective
from collsynth.compiler import CompileError, trace_to_dag
from collsynth.compiler.dag import InstrDAG
from collsynth.compiler.pipeline import with_options
from collsynth.language import ProgramBuilder
from collsynth.language.program import ProgramError, Slot, validate_program
from collsynth.language.timed import lower_timed
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import fully_connected, resolve_topology

INT_FIELDS = ("rank", "src_off", "dst_off", "cnt", "send_peer", "recv_peer", "tb_hint", "ch_hint", "line", "send_to")


def _programs():
    for shape in ("torus:3x3", "torus:4x4", "ring:5"):
        topology = resolve_topology(shape)
        collective = make_collective("allgather", topology.num_ranks)
        yield lower_timed(greedy(topology, collective, 1 << 20).algorithm)
    for topology, collective in (("ring:8", "allgather"), ("dgx1", "allgather"), ("fully_connected:8", "alltoall")):
        for _, program in library_programs(resolve_topology(topology), collective):
            yield program
    b = ProgramBuilder("local", fully_connected(3), make_collective("allgather", 3))  # local copies, scratch
    for r in range(3):
        b.chunk(r, "input", 0).copy(r, "output", r)
        b.chunk(r, "input", 0).copy(r, "scratch", 1)
        b.chunk(r, "scratch", 1).copy((r + 1) % 3, "output", r, sendtb=1, recvtb=2, ch=0)
        b.chunk(r, "input", 0).copy((r + 2) % 3, "output", r)
    yield b.build()


def _loop_trace(monkeypatch, program):
    with monkeypatch.context() as m:
        m.setattr(dag_module, "trace_columns", lambda *args: None)
        return trace_to_dag(program)


@pytest.mark.parametrize("manual", [False, True])
def test_the_array_trace_makes_the_loops_records_and_true_columns(monkeypatch, manual):
    taken = 0
    for program in _programs():
        program = with_options(program, threadblock_policy="manual" if manual else "auto")
        fast, slow = trace_to_dag(program), _loop_trace(monkeypatch, program)
        assert fast == slow, program.name
        assert [tuple(map(type, ins)) for ins in fast.instrs] == [tuple(map(type, ins)) for ins in slow.instrs]
        taken += bool(fast.cache)
        fresh = InstrDAG(fast.num_ranks, fast.instrs, fast.source)  # no cache: every column from the records
        for name in INT_FIELDS:
            assert np.array_equal(fast.values(name), fresh.values(name)), (program.name, name)
        for name in ("preds", "after"):
            assert fast.column(name) == fresh.column(name)
            assert all(np.array_equal(a, b) for a, b in zip(fast.edge_csr(name), fresh.edge_csr(name), strict=True))
        for kinds in ({"s"}, {"r", "rrc"}, {"cpy", "re"}):
            assert np.array_equal(fast.is_kind(kinds), fresh.is_kind(kinds)), (program.name, kinds)
        assert all(np.array_equal(a, b) for a, b in zip(fast.edge_arrays(), fresh.edge_arrays(), strict=True))
    assert taken >= 4  # the lowered programs and the local-copy one take the arrays


def test_a_read_of_an_unwritten_slot_is_refused_as_the_loop_refuses_it(monkeypatch):
    b = ProgramBuilder("unwritten", fully_connected(2), make_collective("allgather", 2))
    b.chunk(0, "input", 0).copy(1, "output", 0)
    program = b.build()
    first = program.ops[0]  # then rank 1's output[1], which nobody wrote, to rank 0
    program = replace(program, ops=(first, replace(first, src=Slot(1, "output", 1), dst=Slot(0, "output", 1))))
    with pytest.raises(CompileError) as fast:
        trace_to_dag(program)
    with pytest.raises(CompileError) as slow:
        _loop_trace(monkeypatch, program)
    assert str(fast.value) == str(slow.value)


def _bad_programs():
    """A one-chunk-copy program (the arrays' kind) made malformed one field at a time."""
    b = ProgramBuilder("bad", resolve_topology("ring:4"), make_collective("allgather", 4))
    for r in range(4):
        b.chunk(r, "input", 0).copy(r, "output", r)
        b.chunk(r, "input", 0).copy((r + 1) % 4, "output", r, sendtb=0, recvtb=1, ch=0)
    program = b.build()
    message = program.ops[1]
    bad = {
        "source rank": replace(message, src=replace(message.src, rank=4)),
        "destination rank": replace(message, dst=replace(message.dst, rank=-1)),
        "index": replace(message, dst=replace(message.dst, index=4)),
        "negative index": replace(message, src=replace(message.src, index=-1)),
        "buffer": replace(message, dst=replace(message.dst, buffer="nowhere")),
        "link": replace(message, dst=replace(message.dst, rank=2)),
        "sendtb": replace(message, sendtb=-1),
        "recvtb": replace(message, recvtb=1.0),
        "channel": replace(message, channel=-2),
        "count": replace(message, dst=replace(message.dst, count=2)),
    }
    yield "none", program
    for name, op in bad.items():
        yield name, replace(program, ops=(*program.ops[:5], op, *program.ops[6:]))


def test_the_program_before_it_is_made_malformed_takes_the_arrays():
    assert trace_to_dag(dict(_bad_programs())["none"]).cache


@pytest.mark.parametrize("name", [name for name, _ in _bad_programs() if name != "none"])
def test_a_malformed_program_gets_validate_programs_message(monkeypatch, name):
    program = dict(_bad_programs())[name]
    with pytest.raises(ProgramError) as expected:
        validate_program(program)
    refused = []
    real = dag_module.trace_columns
    monkeypatch.setattr(dag_module, "trace_columns", lambda *args: refused.append(real(*args) is None) or None)
    with pytest.raises(ProgramError) as got:
        trace_to_dag(program)
    assert str(got.value) == str(expected.value)
    assert refused == [True]  # the arrays refused it (their checks are validate_program's), not just the loop
