"""Lowering a hierarchical composition (collsynth.synth.cluster.hierarchical) with one message per block.

`lower_to_program` emits one op per chunk and leaves it to the compiler's aggregation to merge a link's
contiguous chunks into one transfer; the compiler merges only chunks with the same producer. In a
composition, a block that a phase forwards whole was assembled by the previous phase from several receives
(e.g. the node AllGather of an AllReduce forwards the N sub-blocks the rail phase delivered), so each piece
became its own message: N alphas per hop where the library's programs pay one (their `copy` of a range is
one op whatever wrote it).

`coalesce_transfers` merges runs of consecutive ops of a program that move contiguous slots over one link
(same op, same source rank and buffer, same destination rank and buffer, both ranges adjacent) into one op
of the combined count. It is safe for remote ops: the first op writes only on the destination rank and the
second reads only the source rank's slots (plus, for a reduction, its own destination slots, disjoint from
the first's), so no op of a run reads what an earlier op of the run wrote. `validate_program` re-checks the
merged ops; the compiled IR goes through the reference interpreter like every other before it is written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from collsynth.language.lower import lower_to_program
from collsynth.language.program import ChunkOp, Program, Slot, validate_program
from collsynth.schedule import Algorithm


def _extends(run: ChunkOp, op: ChunkOp) -> bool:
    """Whether `op` continues `run` on the same link, both ranges adjacent, with no placement hints."""
    return (op.op == run.op and op.src.rank == run.src.rank != run.dst.rank == op.dst.rank
            and op.src.buffer == run.src.buffer and op.dst.buffer == run.dst.buffer
            and op.src.index == run.src.end and op.dst.index == run.dst.end
            and run.sendtb is run.recvtb is run.channel is None
            and op.sendtb is op.recvtb is op.channel is None)


def coalesce_transfers(program: Program) -> Program:
    """`program` with each run of consecutive, contiguous transfers over one link as one op (module doc)."""
    merged: list[ChunkOp] = []
    for op in program.ops:
        if merged and _extends(merged[-1], op):
            run = merged[-1]
            count = run.src.count + op.src.count
            merged[-1] = replace(run, src=Slot(run.src.rank, run.src.buffer, run.src.index, count),
                                 dst=Slot(run.dst.rank, run.dst.buffer, run.dst.index, count))
        else:
            merged.append(op)
    return replace(program, ops=tuple(merged))


def lower_composition(algorithm: Algorithm, **options: Any) -> Program:
    """`lower_to_program(algorithm, **options)` with its transfers coalesced (module docstring)."""
    program = coalesce_transfers(lower_to_program(algorithm, **options))
    validate_program(program)
    return program
