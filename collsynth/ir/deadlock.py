"""Deadlock under bounded connections: does an IR run to completion when every connection holds at most
`capacity` messages (the runtime's FIFO slots, NCCL_STEPS = 8: collsynth.core.limits.FIFO_SLOTS)?

Only the control of the MSCCL semantics is run (no data): a threadblock runs its steps in order; a step
waits for its dependency flag (`depid` has published step >= `deps`), a receiving step for a message on
its connection, a sending step for room on its connection (fewer than `capacity` messages in flight); a
step that receives and sends does both at once, so it keeps the slot it reads from until its own send has
room, as in the runtime. This is the reference interpreter's scheduling (collsynth.runtime.cpu) without
buffers, so the compiler (which comes before the runtime) can refuse a deadlocking IR itself.

Why one run decides it: each connection has one sender and one receiver threadblock, and every wait is
for something only ever granted more (a flag grows, a message stays until its one receiver takes it,
room stays until the one sender fills it). A step enabled stays enabled until its threadblock takes it,
so every schedule reaches the same final state: all orders deadlock or none does.

A program that needs more buffering than the runtime has (e.g. two peers that each send more than
`capacity` messages to the other before receiving any) passes with unbounded FIFOs and deadlocks here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from collsynth.core.steps import RECEIVING_TYPES, SENDING_TYPES
from collsynth.ir import NOP, Algo

Connection = tuple[int, int, int]  # (sender rank, receiver rank, channel)


@dataclass(frozen=True)
class _Op:
    label: str
    dep_tb: int  # global threadblock index, -1 for none
    dep_step: int
    recv: Connection | None
    send: Connection | None
    publishes: int  # the step number published when done, -1 for none


def _ops(ir: Algo) -> list[list[_Op]]:
    """Every threadblock's steps, threadblocks numbered globally in (gpu, tb) order."""
    programs: list[list[_Op]] = []
    for gpu in ir.gpus:
        first = len(programs)
        for tb in gpu.tbs:
            programs.append([
                _Op(label=f"gpu {gpu.id} tb {tb.id} step {st.s} ({st.type})",
                    dep_tb=first + st.depid if st.depid >= 0 else -1, dep_step=st.deps,
                    recv=(tb.recv, gpu.id, tb.chan) if st.type in RECEIVING_TYPES else None,
                    send=(gpu.id, tb.send, tb.chan) if st.type in SENDING_TYPES else None,
                    publishes=st.s if st.hasdep and st.type != NOP else -1)
                for st in tb.steps])
    return programs


def bounded_deadlock(ir: Algo, capacity: int) -> str | None:
    """None when `ir` runs to completion with connections of `capacity` messages; otherwise one line naming
    how many threadblocks are stuck and what one of them waits for (a full connection first: the cause)."""
    if capacity < 1:
        raise ValueError(f"capacity={capacity}: a connection must hold at least one message")
    programs = _ops(ir)
    pcs = [0] * len(programs)
    flags = [-1] * len(programs)
    in_flight: dict[Connection, int] = {}
    waiting: dict[tuple[str, object], list[int]] = {}  # ("flag", tb) / ("msg", conn) / ("room", conn) -> tbs
    ready = deque(range(len(programs)))

    def wake(key: tuple[str, object]) -> None:
        ready.extend(waiting.pop(key, ()))

    while ready:
        tb = ready.popleft()
        program, pc = programs[tb], pcs[tb]
        while pc < len(program):
            op = program[pc]
            if op.dep_tb >= 0 and flags[op.dep_tb] < op.dep_step:
                waiting.setdefault(("flag", op.dep_tb), []).append(tb)
                break
            if op.recv is not None and in_flight.get(op.recv, 0) == 0:
                waiting.setdefault(("msg", op.recv), []).append(tb)
                break
            if op.send is not None and in_flight.get(op.send, 0) >= capacity:
                waiting.setdefault(("room", op.send), []).append(tb)
                break
            if op.recv is not None:
                in_flight[op.recv] -= 1
                wake(("room", op.recv))
            if op.send is not None:
                in_flight[op.send] = in_flight.get(op.send, 0) + 1
                wake(("msg", op.send))
            if op.publishes >= 0:
                flags[tb] = op.publishes
                wake(("flag", tb))
            pc += 1
        pcs[tb] = pc
    stuck = [tb for tb, program in enumerate(programs) if pcs[tb] < len(program)]
    if not stuck:
        return None
    reasons = [_why(programs[tb][pcs[tb]], flags, in_flight) for tb in stuck]
    why = min(reasons, key=lambda r: r[0])[1]  # a full connection first: that is what bounded FIFOs add
    return (f"deadlock with connections of {capacity} message slot(s): {len(stuck)} threadblock(s) can never "
            f"finish; {why}")


def _why(op: _Op, flags: list[int], in_flight: dict[Connection, int]) -> tuple[int, str]:
    if op.dep_tb >= 0 and flags[op.dep_tb] < op.dep_step:
        return 2, f"{op.label} waits for a dependency flag"
    if op.recv is not None and in_flight.get(op.recv, 0) == 0:
        return 1, f"{op.label} waits for a message from rank {op.recv[0]} on channel {op.recv[2]}"
    assert op.send is not None
    return 0, f"{op.label} waits for a free slot on its connection to rank {op.send[1]} channel {op.send[2]}"
