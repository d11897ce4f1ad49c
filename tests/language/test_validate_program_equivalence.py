"""validate_program's one-pass checks give the verdict of the frozen per-op reference
(validate_program_before.py) on random ops: the same exception type and message, or both accept."""

from hypothesis import given, settings
from hypothesis import strategies as st
from validate_program_before import validate_program as validate_program_before

from collsynth.collectives import make_collective
from collsynth.language.program import ChunkOp, Program, Slot, validate_program
from collsynth.topologies import line, ring

RANKS = 4
TOPOLOGIES = (ring(RANKS), line(RANKS))
SCRATCH = ((), ((("scratch", 3),),) * RANKS, ((("tmp", 1), ("scratch", 2)),) * 2)


def slots() -> st.SearchStrategy[Slot]:
    return st.builds(Slot, st.integers(-1, RANKS), st.sampled_from(("input", "output", "scratch", "tmp")),
                     st.integers(-1, 5), st.integers(0, 3))


HINTS = st.sampled_from((None, None, None, -1, 0, 2, "x", True, 1.0))
OPS = st.builds(ChunkOp, st.sampled_from(("copy", "copy", "reduce", "bogus")), slots(), slots(), HINTS, HINTS,
                HINTS, st.integers(0, 3))


def verdict(check, program: Program) -> tuple[str, str] | None:
    try:
        check(program)
    except Exception as error:  # noqa: BLE001 - any exception is part of the verdict
        return type(error).__name__, str(error)
    return None


@settings(max_examples=600, deadline=None)
@given(st.sampled_from(TOPOLOGIES), st.sampled_from(("allgather", "allreduce", "alltoall")),
       st.sampled_from(SCRATCH), st.lists(OPS, max_size=4))
def test_same_verdict_as_the_reference(topology, collective, scratch, ops):
    program = Program("p", topology, make_collective(collective, RANKS), buffers=scratch, ops=tuple(ops))
    assert verdict(validate_program, program) == verdict(validate_program_before, program)


def test_a_valid_program_passes_both():
    ops = (ChunkOp("copy", Slot(0, "input", 0), Slot(1, "output", 0), sendtb=0),)
    program = Program("p", ring(RANKS), make_collective("allgather", RANKS), ops=ops)
    assert verdict(validate_program, program) is None and verdict(validate_program_before, program) is None
