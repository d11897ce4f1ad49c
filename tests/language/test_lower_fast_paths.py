"""The lowering's fast paths (issue 10: a million ops at 1024 ranks) give exactly what the general code gives:
the direct constructors build equal slots and ops, `emit`'s one-chunk path equals its general path (ops, state,
scratch sizes, error messages), references taken after generated ops still see later writes as stale, and
`timed_hints` places every op as the one-dictionary-per-op placement it replaced, and the lowering as a whole
gives the program main's lowering gave (tests/language/lower_before.py)."""

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from lower_before import lower_before
from test_lower import ALGORITHMS
from test_lower_emit import greedy_allgather
from test_lower_merge import random_gathers

import collsynth.language.timed as timed
from collsynth.collectives import make_collective
from collsynth.language import ProgramBuilder, ProgramError
from collsynth.language.builder import caller_location
from collsynth.language.lower import LoweringError, _lower, lower_to_program
from collsynth.language.program import COPY, REDUCE, ChunkOp, Program, Slot, chunk_op, unit_slot
from collsynth.schedule import Send, Step
from collsynth.topologies import fully_connected, ring

CASES = {**ALGORITHMS, "greedy-torus": lambda: greedy_allgather("torus:3x3")}
hint = st.none() | st.integers(0, 9)


@given(st.integers(0, 99), st.sampled_from(["input", "output", "scratch", "s1"]), st.integers(0, 99))
def test_unit_slot_is_the_dataclass_slot(rank, buffer, index):
    made, plain = unit_slot(rank, buffer, index), Slot(rank, buffer, index)
    assert made == plain and hash(made) == hash(plain) and repr(made) == repr(plain) and type(made) is Slot


@given(st.sampled_from([COPY, REDUCE]), hint, hint, hint, st.integers(0, 500), st.sampled_from(["", "p.py"]))
def test_chunk_op_is_the_dataclass_op(op, sendtb, recvtb, channel, line, file):
    src, dst = Slot(0, "input", 0), Slot(1, "output", 2)
    made = chunk_op(op, src, dst, sendtb, recvtb, channel, line, file)
    plain = ChunkOp(op, src, dst, sendtb, recvtb, channel, line, file)
    assert made == plain and hash(made) == hash(plain) and repr(made) == repr(plain) and made.file == file


def _general_only(monkeypatch):
    monkeypatch.setattr(ProgramBuilder, "_emit_unit", lambda *args: False)


@pytest.mark.parametrize("merge", ["contiguous", "stage"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_emit_fast_path_gives_the_general_paths_program(name, merge, monkeypatch):
    def lowered() -> Program:  # one line asks for both lowerings: their ops carry the same location
        return lower_to_program(CASES[name](), merge=merge)

    fast = lowered()
    _general_only(monkeypatch)
    general = lowered()
    assert fast == general and fast.buffers == general.buffers


def _emitted(ops, general: bool, monkeypatch) -> tuple:
    """(ops, symbolic slots, scratch sizes, error message) after emitting `ops` on a 3-rank ring AllReduce."""
    with monkeypatch.context() as patch:
        if general:
            _general_only(patch)
        b = ProgramBuilder("p", ring(3), make_collective("allreduce", 3))
        error = None
        try:
            for op, src, dst in ops:
                b.emit(op, src, dst, 7, "f.py")
        except ProgramError as exc:
            error = str(exc)
        return b.ops, dict(b.state.slots), b._scratch, error


SLOTS = st.builds(Slot, st.integers(0, 2), st.sampled_from(["input", "output", "scratch"]), st.integers(0, 2))


@given(st.lists(st.tuples(st.sampled_from([COPY, REDUCE]), SLOTS, SLOTS), max_size=8))
def test_emit_fast_path_equals_the_general_path_op_by_op(ops):
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _emitted(ops, False, monkeypatch) == _emitted(ops, True, monkeypatch)


def test_a_reference_taken_after_generated_ops_sees_a_later_generated_write():
    b = ProgramBuilder("p", fully_connected(3), make_collective("allgather", 3))
    b.emit(COPY, Slot(0, "input", 0), Slot(1, "output", 0))  # before any reference: no versions kept
    ref = b.chunk(1, "output", 0)
    b.emit(COPY, Slot(2, "input", 0), Slot(1, "output", 0))
    with pytest.raises(ProgramError, match="stale reference"):
        ref.copy(2, "output", 0)


def _placed_as_before(program: Program) -> tuple[ChunkOp, ...]:
    """The placement `timed_hints` had before its one-look-up-per-op form (per-op dictionaries)."""
    tbs: list[dict] = [{} for _ in range(program.topology.num_ranks)]
    counts: dict = {}
    ops = []
    for op in program.ops:
        s, d = op.src.rank, op.dst.rank
        seen = counts.get((s, d), 0)
        counts[(s, d)] = seen + 1
        channel = seen // timed.MAX_STEPS_PER_TB
        if s == d:
            sendtb = tbs[s].setdefault(("local", s, channel), len(tbs[s]))
            ops.append(ChunkOp(op.op, op.src, op.dst, sendtb, None, 0, op.line, op.file))
        else:
            sendtb = tbs[s].setdefault(("send", d, channel), len(tbs[s]))
            recvtb = tbs[d].setdefault(("recv", s, channel), len(tbs[d]))
            ops.append(ChunkOp(op.op, op.src, op.dst, sendtb, recvtb, channel, op.line, op.file))
    return tuple(ops)


@pytest.mark.parametrize("steps_per_tb", [1, 2, 256])
@pytest.mark.parametrize("name", sorted(CASES))
def test_timed_hints_place_ops_as_before(name, steps_per_tb, monkeypatch):
    monkeypatch.setattr(timed, "MAX_STEPS_PER_TB", steps_per_tb)  # 1 and 2: links change channel often
    program = lower_to_program(CASES[name]())
    placed = timed.timed_hints(program)
    assert [(op, op.file) for op in placed.ops] == [(op, op.file) for op in _placed_as_before(program)]


def _same_as_before(algorithm, merge: str, instances: int = 1) -> None:
    program = lower_to_program(algorithm, merge=merge, instances=instances)
    first = program.ops[0] if program.ops else None
    before = lower_before(algorithm, (first.line, first.file) if first else caller_location(), merge=merge,
                          instances=instances)
    assert program == before and program.buffers == before.buffers
    assert [op.file for op in program.ops] == [op.file for op in before.ops]


@pytest.mark.parametrize("merge", ["contiguous", "stage"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_lowering_gives_the_program_main_gave(name, merge):
    _same_as_before(CASES[name](), merge)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(random_gathers())
def test_lowering_of_random_schedules_gives_the_program_main_gave(case):
    algorithm, merge, _, _, instances, _ = case
    _same_as_before(algorithm, merge, instances)


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_schedule_cut_short_fails_as_before(name):
    algorithm = CASES[name]()
    cut = replace(algorithm, steps=algorithm.steps[:-1])
    with pytest.raises(LoweringError) as now:
        lower_to_program(cut)
    with pytest.raises(LoweringError) as before:
        lower_before(cut, (0, ""))
    assert str(now.value) == str(before.value)


@pytest.mark.parametrize("steps_per_tb", [1, 2, 256])
@pytest.mark.parametrize("merge", ["contiguous", "stage"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_placing_ops_as_they_are_emitted_equals_placing_the_lowered_program(name, merge, steps_per_tb, monkeypatch):
    monkeypatch.setattr(timed, "MAX_STEPS_PER_TB", steps_per_tb)
    algorithm = CASES[name]()

    def both() -> tuple[Program, Program]:  # one line: both lowerings' ops carry the same location
        return timed.timed_hints(lower_to_program(algorithm, merge=merge)), _lower(algorithm, placement, merge=merge)

    placement = timed.TimedPlacement(algorithm.topology.num_ranks)
    after, during = both()
    during = replace(during, options=timed._timed_options(during.options))
    assert during == after and during.buffers == after.buffers
    assert [op.file for op in during.ops] == [op.file for op in after.ops]


def test_lower_timed_is_timed_hints_of_the_lowering():
    algorithm = greedy_allgather("torus:3x3")

    def both() -> tuple[Program, Program]:
        return timed.lower_timed(algorithm), timed.timed_hints(lower_to_program(algorithm))

    during, after = both()
    assert during == after and during.buffers == after.buffers


@pytest.mark.parametrize("hints", [(-1, None, None), (True, 0, 0), (0, 1, -2)])
def test_emit_refuses_or_converts_hints_as_the_general_path(hints, monkeypatch):
    def emitted() -> tuple:
        b = ProgramBuilder("p", ring(3), make_collective("allgather", 3))
        try:
            b.emit(COPY, Slot(0, "input", 0), Slot(1, "output", 0), 3, "f.py", hints)
        except ProgramError as exc:
            return str(exc)
        return b.ops

    fast = emitted()
    _general_only(monkeypatch)
    assert fast == emitted()


@pytest.mark.parametrize("chunk, src, dst", [(0, 9, 1), (0, -1, 1), (0, 0, 9), (0, 0, -8), (9, 0, 1), (-1, 0, 1)])
def test_a_send_outside_the_chunks_or_ranks_is_refused_by_name(chunk, src, dst):
    # The state per (chunk, rank) is one flat list: chunk 0 on rank 9 of 9 ranks would be chunk 1 on rank 0.
    algorithm = CASES["greedy-torus"]()
    bad = Send(chunk, src, dst)
    cut = replace(algorithm, steps=(Step(1, (bad,)), *algorithm.steps))
    with pytest.raises(LoweringError, match=rf"step 0: send {bad} names a chunk or rank outside the collective's "
                                            "9 chunks and 9 ranks"):
        lower_to_program(cut)
