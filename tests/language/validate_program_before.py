"""The language's validate_program as it was before its one-pass form (main ee77cf2), frozen: the reference
test_validate_program_equivalence compares the new one's verdict with."""

from collsynth.language.buffers import INPUT, OUTPUT, is_scratch
from collsynth.language.program import COPY, REDUCE, ChunkOp, Program, ProgramError, where


def validate_program(program: Program) -> None:
    """Raise ProgramError on the first malformed op: ranks, buffers, counts, hints, links."""
    n = program.num_ranks
    coll = program.collective
    topo = program.topology
    links = topo.link_map
    sizes = [{INPUT: coll.input_chunks, OUTPUT: coll.output_chunks, **program.scratch_sizes(r)} for r in range(n)]
    for op in program.ops:
        src, dst = op.src, op.dst
        if op.op not in (COPY, REDUCE) or src.count != dst.count or src.count < 1:
            _refuse(op, f"{op.op!r} of {src} to {dst}: op must be 'copy' or 'reduce' with equal counts >= 1")
        for slot in (src, dst):
            if not 0 <= slot.rank < n:
                _refuse(op, f"rank {slot.rank} is outside 0..{n - 1}")
            size = sizes[slot.rank].get(slot.buffer)
            if slot.index < 0 or size is None or slot.index + slot.count > size:
                if is_scratch(slot.buffer):
                    _refuse(op, f"{slot} is outside rank {slot.rank}'s scratch buffer {slot.buffer!r} ({size or 0} "
                                "chunks); declare it in Program.buffers")
                _refuse(op, f"{slot} is outside the {slot.buffer} buffer ({size} chunks per rank for {coll})")
        if src.rank != dst.rank and (src.rank, dst.rank) not in links:
            _refuse(op, f"no link from rank {src.rank} to rank {dst.rank} in topology {topo.name}; route through a "
                        "neighbour or use a topology with that link")
        for label, hint in (("sendtb", op.sendtb), ("recvtb", op.recvtb), ("ch", op.channel)):
            if hint is not None and (not isinstance(hint, int) or hint < 0):
                _refuse(op, f"{label}={hint!r}: hints are integers >= 0 (or None for automatic)")


def _refuse(op: ChunkOp, message: str) -> None:
    raise ProgramError(f"{where(op.line, op.file)}{message}")
