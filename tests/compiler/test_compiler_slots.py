"""The compiler never emits an IR that needs more buffering than the runtime has (NCCL_STEPS = 8 slots per
connection): with unbounded FIFOs two peers that each send more than 8 messages before receiving pass
the interpreter, and hang in MSCCL."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.algorithms import build
from collsynth.collectives import make_collective
from collsynth.compiler import CompileError, compile_program
from collsynth.compiler.pipeline import _compile_once, with_options
from collsynth.compiler.placement import Schedule
from collsynth.core.limits import FIFO_SLOTS
from collsynth.ir.deadlock import bounded_deadlock
from collsynth.language import ProgramBuilder
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.runtime import execute
from collsynth.runtime.result import DEADLOCK
from collsynth.topologies import fully_connected, resolve_topology


def exchange(orders: tuple[list[int], list[int]]):
    """AllToAll on 2 ranks, `len(order)` chunks per pair: rank r sends its chunks to the other one by one
    in `orders[r]` (not aggregated into fewer messages), and copies its own block."""
    chunks = len(orders[0])
    b = ProgramBuilder("exchange", fully_connected(2), make_collective("alltoall", 2, chunks))
    for rank, order in enumerate(orders):
        peer = 1 - rank
        for k in order:
            b.chunk(rank, INPUT, peer * chunks + k, 1).copy(peer, OUTPUT, rank * chunks + k)
        b.chunk(rank, INPUT, rank * chunks, chunks).copy(rank, OUTPUT, rank * chunks)
    return with_options(b.build(), aggregate=False)


def in_flight_peak(sched: Schedule) -> int:
    """The most messages of one connection sent and not yet received along the schedule's order."""
    flight: dict[tuple[int, int, int], int] = {}
    peak = 0
    for i in sched.order:
        ins = sched.dag.instrs[i]
        ch = sched.channel[i]
        if ins.kind in ("r", "rcs", "rrc", "rrs", "rrcs"):
            flight[(ins.recv_peer, ins.rank, ch)] -= 1
        if ins.kind in ("s", "rcs", "rrs", "rrcs"):
            key = (ins.rank, ins.send_peer, ch)
            flight[key] = flight.get(key, 0) + 1
            peak = max(peak, flight[key])
    return peak


def test_the_unbounded_schedule_of_an_exchange_hangs_with_the_runtime_slots():
    # The reproducer: each rank's paired threadblock sends 12 messages to its peer, then receives 12.
    program = exchange((list(range(12)), list(range(12))))
    old = _compile_once(program, 1, False, slots=None)
    assert execute(old, fifo_capacity=None).passed
    assert execute(old).failure == DEADLOCK
    assert "waits for a free slot" in (bounded_deadlock(old, FIFO_SLOTS) or "")
    fixed = compile_program(program)
    assert bounded_deadlock(fixed, FIFO_SLOTS) is None
    assert execute(fixed).passed


def test_library_alltoall_on_nine_nodes_compiles_within_the_slots():
    # two_step_alltoall on 9 nodes: 9 messages each way between the two GPUs of a node (it hung before).
    program = build("two_step_alltoall", resolve_topology("9xfully_connected:2"))
    assert bounded_deadlock(_compile_once(program, 1, False, slots=None), FIFO_SLOTS) is not None
    ir = compile_program(program, "msccl-executor")
    assert bounded_deadlock(ir, FIFO_SLOTS) is None
    assert execute(ir).passed


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 20).flatmap(lambda n: st.tuples(st.permutations(range(n)), st.permutations(range(n)))),
       st.booleans())
def test_every_schedule_stays_within_the_slots(orders, pair):
    seen: list[Schedule] = []
    ir = compile_program(exchange(orders), pair_threadblocks=pair,
                         after_each=lambda name, form: seen.append(form) if name == "schedule" else None)
    assert in_flight_peak(seen[0]) <= FIFO_SLOTS
    assert bounded_deadlock(ir, FIFO_SLOTS) is None
    assert execute(ir).passed


def test_an_ir_that_would_hang_is_refused_in_one_line(monkeypatch):
    # Force the compiler's order to ignore the slots, as a hand-placed or future pass might: the final check
    # still refuses what would hang, naming the deadlock.
    import collsynth.compiler.pipeline as pipeline

    unbounded = pipeline.schedule
    monkeypatch.setattr(pipeline, "schedule", lambda channelled, slots: unbounded(channelled, None))
    with pytest.raises(CompileError) as refused:
        compile_program(exchange((list(range(12)), list(range(12)))), pair_threadblocks=True)
    message = str(refused.value)
    assert "\n" not in message
    assert "would hang in the runtime (deadlock with connections of 8 message slot(s)" in message
