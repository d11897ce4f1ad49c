"""Lowering synthesized algorithms to DSL programs (collsynth.language.lower)."""

import pytest

from collsynth.collectives import make_collective
from collsynth.language.lower import lower_to_program, program_to_python
from collsynth.schedule import COPY, REDUCE, Algorithm, Send, Step, verify
from collsynth.topologies import fully_connected, line, ring


def ring_allgather(n: int) -> Algorithm:
    steps = [Step(1, tuple(Send((r - k) % n, r, (r + 1) % n) for r in range(n))) for k in range(n - 1)]
    return Algorithm("ring-ag", ring(n), make_collective("allgather", n), tuple(steps))


def ring_allreduce(n: int, inplace: bool = False) -> Algorithm:
    rs = [Step(1, tuple(Send((r - k - 1) % n, r, (r + 1) % n, REDUCE) for r in range(n))) for k in range(n - 1)]
    ag = [Step(1, tuple(Send((r - k) % n, r, (r + 1) % n, COPY) for r in range(n))) for k in range(n - 1)]
    return Algorithm("ring-ar", ring(n), make_collective("allreduce", n, inplace=inplace), tuple(rs + ag))


def exchange_allreduce(inplace: bool) -> Algorithm:
    """Two ranks reduce every chunk into each other in one step: a swap that needs staging when inplace."""
    sends = tuple(Send(c, s, 1 - s, REDUCE) for c in range(2) for s in range(2))
    return Algorithm("xchg", fully_connected(2), make_collective("allreduce", 2, inplace=inplace), (Step(2, sends),))


def line_gather() -> Algorithm:
    """Rank 2's chunk reaches root 0 through rank 1, which only relays it."""
    steps = (Step(1, (Send(1, 1, 0), Send(2, 2, 1))), Step(1, (Send(2, 1, 0),)))
    return Algorithm("line-gather", line(3), make_collective("gather", 3, root=0), steps)


def line_reducescatter() -> Algorithm:
    """Chunk 0 (owned by rank 0) is reduced along 2 -> 1 -> 0; rank 1 accumulates a partial it does not keep."""
    coll = make_collective("reducescatter", 3)
    steps = (
        Step(2, (Send(0, 2, 1, REDUCE), Send(2, 0, 1, REDUCE), Send(1, 0, 1, REDUCE), Send(1, 2, 1, REDUCE))),
        Step(1, (Send(0, 1, 0, REDUCE), Send(2, 1, 2, REDUCE))),
    )
    return Algorithm("line-rs", line(3), coll, steps)


ALGORITHMS = {
    "ring-ag": lambda: ring_allgather(5),
    "ring-ar": lambda: ring_allreduce(4),
    "ring-ar-inplace": lambda: ring_allreduce(4, inplace=True),
    "xchg": lambda: exchange_allreduce(False),
    "xchg-inplace": lambda: exchange_allreduce(True),
    "line-gather": line_gather,
    "line-rs": line_reducescatter,
}


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_lowered_program_meets_postcondition_symbolically(name):
    algo = ALGORITHMS[name]()
    verify(algo)
    program = lower_to_program(algo)  # raises if the DSL's symbolic execution finds the postcondition broken
    assert program.collective == algo.collective
    sends = sum(len(step.sends) for step in algo.steps)
    remote = [op for op in program.ops if op.src.rank != op.dst.rank]
    assert len(remote) == sends  # one remote op per send: nothing lost, nothing invented


def test_reductions_use_the_receivers_slot_as_local_operand():
    program = lower_to_program(ring_allreduce(4))
    reduces = [op for op in program.ops if op.op == "reduce"]
    assert reduces
    for op in reduces:
        assert op.dst.rank != op.src.rank
        assert op.dst.buffer == "output"  # out-of-place: the input buffer is never written
    assert all(op.dst.buffer != "input" for op in program.ops)


def test_inplace_swap_is_staged_through_scratch():
    program = lower_to_program(exchange_allreduce(True))
    assert any(op.dst.buffer == "scratch" for op in program.ops)


def test_relay_rank_uses_scratch():
    program = lower_to_program(line_gather())
    relay_writes = [op for op in program.ops if op.dst.rank == 1]
    assert relay_writes and all(op.dst.buffer == "scratch" for op in relay_writes)
    assert dict(program.buffers[1]) == {"scratch": 1}


def test_combining_relay_accumulates_in_scratch():
    program = lower_to_program(line_reducescatter())
    # rank 1 accumulates chunk 0 (owned by rank 0) and chunk 2 (owned by rank 2) without keeping them
    assert dict(program.buffers[1])["scratch"] == 2


def test_python_file_rebuilds_the_same_program():
    program = lower_to_program(ring_allreduce(3))
    text = program_to_python(program, source="ring.json")
    namespace: dict = {"__name__": "lowered"}
    exec(compile(text, "lowered.py", "exec"), namespace)
    rebuilt = namespace["program"]
    assert [(o.op, o.src, o.dst) for o in rebuilt.ops] == [(o.op, o.src, o.dst) for o in program.ops]
    assert rebuilt.collective == program.collective and rebuilt.topology == program.topology


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("instances", [1, 2, 3, 4])
def test_lowered_program_compiles_and_passes_interpreter(name, instances):
    compiler = pytest.importorskip("collsynth.compiler")
    from collsynth.runtime import execute

    program = lower_to_program(ALGORITHMS[name](), instances=instances)
    ir = compiler.compile_program(program)
    result = execute(ir, backend="cpu", nbytes=4096 * 3 * instances)
    assert result.passed, result.message


def test_swap_cycles_with_ops_downstream_of_them_terminate():
    """SMT AllReduce (1,2,8) on dgx1: in-step read/write cycles with other ops queued behind them. Staging
    must break an op on a cycle, not one downstream of it (that looped forever)."""
    from pathlib import Path

    algo = Algorithm.load(Path(__file__).parent / "data" / "dgx1-allreduce-c1s2r8.json")
    verify(algo)
    compiler = pytest.importorskip("collsynth.compiler")
    from collsynth.runtime import execute

    for inplace in (False, True):
        program = lower_to_program(algo, inplace=inplace)
        result = execute(compiler.compile_program(program), backend="cpu", nbytes=8 * 4 * 1024)
        assert result.passed, result.message
