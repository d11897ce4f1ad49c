"""Lowering of timed schedules (greedy, tree packing) so that the compiled program runs as timed.

A timed schedule assumes every link sends and receives independently, in its start-time order. The
default compilation re-queues each connection's messages by critical path, merges contiguous transfers
and pairs sends with receives in one threadblock (a threadblock runs its steps in order, so a receive then
waits behind a send); each of these costs 5-20% in simulation at 256 ranks. `lower_timed` gives every
rank threadblocks per outgoing link, per incoming link and for local copies (placement hints), keeps the
program's message order and does not aggregate.
"""

from __future__ import annotations

from dataclasses import replace

from collsynth.core.collector import paused_collector
from collsynth.core.limits import MAX_STEPS_PER_TB
from collsynth.language.lower import lower_to_program
from collsynth.language.program import Program, chunk_op
from collsynth.schedule import Algorithm


def timed_hints(program: Program) -> Program:
    """Threadblock hints: per rank one threadblock per out-link (sends), one per in-link (receives) and one
    for local copies; every MAX_STEPS_PER_TB ops on a link move on to a new channel (and threadblock), so no
    threadblock exceeds the runtimes' step limit."""
    tbs: list[dict[tuple[str, int, int], int]] = [{} for _ in range(program.topology.num_ranks)]
    # (src, dst) -> [ops so far on that link (src == dst: local copies), sendtb, recvtb, channel]: the
    # threadblocks of a link change only every MAX_STEPS_PER_TB ops, so most ops need this one look-up.
    links: dict[tuple[int, int], list] = {}
    ops = []
    for op in program.ops:
        s, d = op.src.rank, op.dst.rank
        link = links.get((s, d))
        if link is None:
            link = links[(s, d)] = [0, 0, None, 0]
        seen = link[0]
        link[0] = seen + 1
        if seen % MAX_STEPS_PER_TB == 0:  # the link's first op on a new channel: place its threadblocks
            channel = seen // MAX_STEPS_PER_TB
            if s == d:
                mine = tbs[s]
                link[1:] = [mine.setdefault(("local", s, channel), len(mine)), None, 0]
            else:
                mine, theirs = tbs[s], tbs[d]
                link[1:] = [mine.setdefault(("send", d, channel), len(mine)),
                            theirs.setdefault(("recv", s, channel), len(theirs)), channel]
        ops.append(chunk_op(op.op, op.src, op.dst, link[1], link[2], link[3], op.line, op.file))
    options = replace(program.options, threadblock_policy="manual", aggregate=False, program_message_order=True)
    return replace(program, ops=tuple(ops), options=options)


def lower_timed(algorithm: Algorithm, *, protocol: str = "Simple", name: str | None = None) -> Program:
    """`lower_to_program` with the placement of `timed_hints`."""
    with paused_collector():  # both build an op per send (a million at 1024 ranks), none of them cyclic
        return timed_hints(lower_to_program(algorithm, protocol=protocol, name=name))
