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
from collsynth.language.lower import lower_placed
from collsynth.language.program import Program, ProgramOptions, chunk_op
from collsynth.schedule import Algorithm


class TimedPlacement:
    """The threadblocks and channel of each op in program order, as `timed_hints` places them: called with an
    op's source and destination ranks, returns its (sendtb, recvtb, channel)."""

    def __init__(self, num_ranks: int) -> None:
        self.tbs: list[dict[tuple[str, int, int], int]] = [{} for _ in range(num_ranks)]
        # (src, dst) -> [ops so far on that link (src == dst: local copies), its current hints]: the threadblocks
        # of a link change only every MAX_STEPS_PER_TB ops, so most ops need this one look-up.
        self.links: dict[tuple[int, int], list] = {}

    def __call__(self, s: int, d: int) -> tuple[int, int | None, int]:
        link = self.links.get((s, d))
        if link is None:
            link = self.links[(s, d)] = [0, None]
        seen = link[0]
        link[0] = seen + 1
        if seen % MAX_STEPS_PER_TB == 0:  # the link's first op on a new channel: place its threadblocks
            channel = seen // MAX_STEPS_PER_TB
            mine = self.tbs[s]
            if s == d:
                link[1] = (mine.setdefault(("local", s, channel), len(mine)), None, 0)
            else:
                theirs = self.tbs[d]
                link[1] = (mine.setdefault(("send", d, channel), len(mine)),
                           theirs.setdefault(("recv", s, channel), len(theirs)), channel)
        return link[1]


def _timed_options(options: ProgramOptions) -> ProgramOptions:
    """Place by the hints, do not aggregate, keep each connection's messages in program order."""
    return replace(options, threadblock_policy="manual", aggregate=False, program_message_order=True)


def timed_hints(program: Program) -> Program:
    """Threadblock hints: per rank one threadblock per out-link (sends), one per in-link (receives) and one
    for local copies; every MAX_STEPS_PER_TB ops on a link move on to a new channel (and threadblock), so no
    threadblock exceeds the runtimes' step limit."""
    place = TimedPlacement(program.topology.num_ranks)
    ops = tuple(chunk_op(op.op, op.src, op.dst, *place(op.src.rank, op.dst.rank), op.line, op.file)
                for op in program.ops)
    return replace(program, ops=ops, options=_timed_options(program.options))


def lower_timed(algorithm: Algorithm, *, protocol: str = "Simple", name: str | None = None) -> Program:
    """`lower_to_program` with the placement of `timed_hints`, given to each op as it is emitted (one op object
    per send instead of two: a million fewer at 1024 ranks)."""
    with paused_collector():  # the lowering builds an op per send, none of them cyclic
        program = lower_placed(algorithm, TimedPlacement(algorithm.topology.num_ranks), protocol=protocol,
                               name=name)
    return replace(program, options=_timed_options(program.options))
