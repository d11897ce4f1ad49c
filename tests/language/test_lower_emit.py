"""The lowering records its ops with `ProgramBuilder.emit` (resolved slots, no references): replaying the same
ops through the DSL's references (`chunk().copy()` / `.reduce()`) must accept every one of them and give the
same program, and `emit` keeps the checks a generated op can fail."""

import pytest
from test_lower import exchange_allreduce, line_gather, line_reducescatter, ring_allgather, ring_allreduce

from collsynth.collectives import make_collective
from collsynth.language import ProgramBuilder, ProgramError
from collsynth.language.lower import lower_to_program
from collsynth.language.program import COPY, REDUCE, Program, Slot
from collsynth.language.timed import lower_timed
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import resolve_topology, ring


def replayed(program: Program) -> Program:
    """The program's ops written again through the DSL's references."""
    b = ProgramBuilder(program.name, program.topology, program.collective, program.instances, program.protocol)
    for op in program.ops:
        src = b.chunk(op.src.rank, op.src.buffer, op.src.index, op.src.count)
        if op.op == COPY:
            src.copy(op.dst.rank, op.dst.buffer, op.dst.index)
        else:
            b.chunk(op.dst.rank, op.dst.buffer, op.dst.index, op.dst.count).reduce(src)
    assert b.check() == []
    return b.build()


def greedy_allgather(topology: str):
    topo = resolve_topology(topology)
    return greedy(topo, make_collective("allgather", topo.num_ranks), 1 << 20).algorithm


@pytest.mark.parametrize("make", [lambda: ring_allgather(5), lambda: ring_allreduce(4), lambda: ring_allreduce(4, True),
                                  lambda: exchange_allreduce(True), line_gather, line_reducescatter,
                                  lambda: greedy_allgather("torus:3x3")])
@pytest.mark.parametrize("merge", ["contiguous", "stage"])
def test_lowered_ops_replay_through_the_dsl_references(make, merge):
    program = lower_to_program(make(), merge=merge)
    again = replayed(program)
    assert [(op.op, op.src, op.dst) for op in again.ops] == [(op.op, op.src, op.dst) for op in program.ops]
    assert again.buffers == program.buffers


def test_every_lowered_op_carries_the_line_that_asked_for_the_lowering():
    program = lower_to_program(ring_allgather(3))
    assert {(op.line, op.file) for op in program.ops} == {(program.ops[0].line, __file__)}


def test_timed_hints_place_each_link_on_its_own_threadblocks():
    program = lower_timed(greedy_allgather("torus:3x3"))
    sends: dict[tuple[int, int | None], set[int]] = {}
    for op in program.ops:
        if op.src.rank != op.dst.rank:
            sends.setdefault((op.src.rank, op.sendtb), set()).add(op.dst.rank)
    assert sends and all(len(peers) == 1 for peers in sends.values())  # one peer per sending threadblock
    assert program.options.threadblock_policy == "manual" and program.options.program_message_order


def test_emit_refuses_a_read_of_an_unwritten_slot():
    b = ProgramBuilder("p", ring(3), make_collective("allgather", 3))
    with pytest.raises(ProgramError, match="nobody wrote"):
        b.emit(COPY, Slot(0, "scratch", 0), Slot(1, "output", 0))
    with pytest.raises(ProgramError, match="nobody wrote"):
        b.emit(REDUCE, Slot(0, "input", 0), Slot(1, "scratch", 0))


def test_emit_refuses_a_missing_link_and_overlapping_local_slots():
    b = ProgramBuilder("p", resolve_topology("line:3"), make_collective("allgather", 3))
    with pytest.raises(ProgramError, match="no link from rank 0 to rank 2"):
        b.emit(COPY, Slot(0, "input", 0), Slot(2, "output", 0))
    b.emit(COPY, Slot(0, "input", 0), Slot(0, "output", 0))
    b.emit(COPY, Slot(0, "input", 0), Slot(0, "output", 1))
    with pytest.raises(ProgramError, match="overlap"):
        b.emit(COPY, Slot(0, "output", 0, 2), Slot(0, "output", 1, 2))
