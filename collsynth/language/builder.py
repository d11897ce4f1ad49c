"""The native DSL: a `ProgramBuilder` that takes the program explicitly, and `ChunkRef`s.

    builder = ProgramBuilder("ring", topology, collective)
    c = builder.chunk(0, Buffer.input, 0)         # a reference to chunk(s) of a rank's buffer
    c = c.copy(1, Buffer.output, 0)               # returns a reference to the destination
    builder.chunk(1, "input", 0).reduce(c)        # dst += src; the receiver's slot is the operand
    program = builder.build()                     # a frozen Program

Every op is executed eagerly on symbolic contents (collsynth.language.symbolic), so mistakes are caught
where they are written, with the DSL line in the message: a stale reference (its chunk was overwritten
since the reference was taken), reading a slot nobody wrote, a copy over a missing link, an index
outside a buffer. MSCCLang's hint convention (-1 = automatic) and None are both accepted.
"""

from __future__ import annotations

import operator
import os
import sys
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from collsynth.collectives import Collective
from collsynth.language.buffers import (
    INPUT,
    OUTPUT,
    Buffer,
    BufferLike,
    buffer_name,
    is_scratch,
    policy_name,
    public_buffer,
)
from collsynth.language.program import (
    COPY,
    REDUCE,
    ChunkOp,
    Program,
    ProgramError,
    ProgramOptions,
    Slot,
    alias_slot,
    buffer_size,
    chunk_op,
    where,
)
from collsynth.language.symbolic import SymbolicState, check_postcondition
from collsynth.topologies import Topology

NO_HINTS: tuple[None, None, None] = (None, None, None)  # emit(): let the compiler place the op
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Where built programs (and XML() results) are collected while `collsynth compile` runs a DSL file.
CAPTURE: ContextVar[list[Any] | None] = ContextVar("collsynth_language_capture", default=None)


def caller_location() -> tuple[int, str]:
    """(line, file) of the innermost frame outside this package: the DSL program's line."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back  # type: ignore[assignment]
    if frame is None:
        return 0, ""
    return frame.f_lineno, frame.f_code.co_filename


def _at_least(value: Any, minimum: int) -> int | None:
    """`value` as an int when it is an integer >= minimum (any integral type), else None."""
    number = value if type(value) is int else _as_int(value)  # noqa: E721 - bool is no index; plain ints skip the call
    return number if number is not None and number >= minimum else None


def _as_int(value: Any) -> int | None:
    """An integer given as any integral type (numpy's too), else None; bools are not ranks."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _hint(value: int | None, label: str, line: int, file: str) -> int | None:
    if value is None or value == -1:
        return None
    number = value if type(value) is int else _as_int(value)  # noqa: E721
    if number is None or number < 0:
        raise ProgramError(f"{where(line, file)}{label}={value!r}: hints are integers >= 0, or -1/None for automatic")
    return number


class ProgramBuilder:
    """Collects the ops of one program; `chunk()` hands out references, `build()` freezes a Program."""

    def __init__(self, name: str, topology: Topology, collective: Collective, instances: int = 1,
                 protocol: str = "Simple", *, instr_fusion: bool = True, threadblock_policy: Any = "auto",
                 interleaved_replication: bool = True, aggregate: bool = True, check: bool = True,
                 dependence_nop: bool = False) -> None:
        if not isinstance(topology, Topology):
            raise ProgramError(f"program {name!r}: topology must be a collsynth Topology (e.g. ring(8)), "
                               f"got {type(topology).__name__}")
        if not isinstance(collective, Collective):
            raise ProgramError(f"program {name!r}: collective must be a collsynth Collective or one of "
                               f"collsynth.language.collectives, got {type(collective).__name__}")
        try:
            policy = policy_name(threadblock_policy)
        except ValueError as exc:
            raise ProgramError(f"program {name!r}: {exc}") from None
        self.name = name
        self.topology = topology
        self.collective = collective
        self.instances = instances
        self.protocol = protocol
        self.options = ProgramOptions(instr_fusion=bool(instr_fusion), threadblock_policy=policy,
                                      interleaved_replication=bool(interleaved_replication),
                                      aggregate=bool(aggregate), check=bool(check),
                                      dependence_nop=bool(dependence_nop))
        # Validate the program-level fields now, so errors point at the constructor.
        Program(name, topology, collective, protocol, instances, self.options, buffers=((),))
        self.state = SymbolicState(collective)
        self._ops: list[ChunkOp] = []
        # Bumped on every write once a reference exists: a reference compares the versions when it was taken with
        # those when it is used, so writes before the first reference need none (a lowered program, which takes
        # none, then keeps no two million-entry dictionaries at 1024 ranks).
        self._version: dict[tuple[int, str, int], int] = {}
        self._written_at: dict[tuple[int, str, int], int] = {}  # line of the last write
        self._referenced = False  # set by the first ChunkRef
        self._scratch: list[dict[str, int]] = [{} for _ in range(collective.num_ranks)]
        self._alias: Callable[[Collective, int, str, int], tuple[str, int]] = alias_slot
        self._links = topology.link_map

    # --- references --------------------------------------------------------------------------
    def chunk(self, rank: int, buffer: BufferLike, index: int, size: int = 1, partial: bool = False) -> ChunkRef:
        """A reference to `size` chunks at (rank, buffer, index); they must hold data. partial: only the first
        must, as in MSCCLang (its chunk() tests the slot at `index` alone; a copy then carries the empty
        slots along, and a reduce over one fails)."""
        line, file = caller_location()
        slot = self._slot(rank, buffer, index, size, line, file, creating=False)
        missing = self.state.first_unwritten(Slot(slot.rank, slot.buffer, slot.index, 1) if partial else slot)
        if missing is not None:
            raise ProgramError(f"{where(line, file)}chunk({rank}, {buffer_name(buffer)}, {index}) reads "
                               f"rank {rank} {slot.buffer}[{missing}], which nobody wrote; copy data there first")
        return ChunkRef(self, slot, self._versions(slot), line)

    def holds_data(self, rank: int, buffer: BufferLike, index: int) -> bool:
        """Whether (rank, buffer, index) holds data yet; a rank, buffer or index outside the program raises."""
        line, file = caller_location()
        slot = self._slot(rank, buffer, index, 1, line, file, creating=False)
        return self.state.first_unwritten(slot) is None

    def _slot(self, rank: int, buffer: BufferLike, index: int, size: int, line: int, file: str, *,
              creating: bool, alias_rank: int | None = None) -> Slot:
        n = self.collective.num_ranks
        if type(rank) is not int:  # noqa: E721 - the fast path; numpy integers are converted
            number = _as_int(rank)
            if number is None:
                raise ProgramError(f"{where(line, file)}rank {rank!r} is not an integer")
            rank = number
        if not 0 <= rank < n:
            raise ProgramError(f"{where(line, file)}rank {rank!r} is outside 0..{n - 1}")
        try:
            name = buffer_name(buffer)
        except TypeError as exc:
            raise ProgramError(f"{where(line, file)}{exc}") from None
        checked_index, checked_size = _at_least(index, 0), _at_least(size, 1)
        if checked_index is None:
            raise ProgramError(f"{where(line, file)}index {index!r} of {name} must be an integer >= 0")
        if checked_size is None:
            raise ProgramError(f"{where(line, file)}size {size!r} must be an integer >= 1")
        index, size = checked_index, checked_size
        if self.collective.inplace:
            # MSCCLang resolves an in-place index with the rank that names it: a copy's destination index with
            # the SENDING rank's offset (get_buffer_index(self.rank, ...)), which in-place programs rely on
            name, index = self._alias(self.collective, rank if alias_rank is None else alias_rank, name, index)
        if is_scratch(name):
            have = self._scratch[rank].get(name)
            if not creating and (have is None or index + size > have):
                raise ProgramError(f"{where(line, file)}rank {rank} scratch buffer {name!r} has {have or 0} chunks; "
                                   f"index {index} size {size} reads past it (copy into it first)")
        else:
            limit = buffer_size(self.collective, name)
            if index + size > limit:
                raise ProgramError(f"{where(line, file)}{name}[{index}:{index + size}] is outside rank {rank}'s "
                                   f"{name} buffer ({limit} chunks for {self.collective})")
        return Slot(rank, name, index, size)

    def _versions(self, slot: Slot) -> tuple[int, ...]:
        get = self._version.get
        rank, buf, index = slot.rank, slot.buffer, slot.index
        if slot.count == 1:
            return (get((rank, buf, index), 0),)
        return tuple(get((rank, buf, i), 0) for i in range(index, index + slot.count))

    def _bump(self, slot: Slot, line: int) -> None:
        if not self._referenced:
            return
        version, written = self._version, self._written_at
        for i in range(slot.index, slot.end):
            key = (slot.rank, slot.buffer, i)
            version[key] = version.get(key, 0) + 1
            written[key] = line

    def _check_fresh(self, ref: ChunkRef, line: int, file: str) -> None:
        slot = ref.slot
        if self._versions(slot) == ref._versions:
            return
        get = self._version.get
        for k, i in enumerate(range(slot.index, slot.end)):
            key = (slot.rank, slot.buffer, i)
            if get(key, 0) != ref._versions[k]:
                raise ProgramError(
                    f"{where(line, file)}stale reference: rank {slot.rank} {slot.buffer}[{i}] was overwritten "
                    f"at line {self._written_at.get(key, 0)} after this reference was taken at line {ref._line}; "
                    f"take a fresh one with chunk({slot.rank}, {slot.buffer!r}, {slot.index}, {slot.count})")

    # --- ops -----------------------------------------------------------------------------------
    def _record(self, op: str, src: Slot, dst: Slot, sendtb: int | None, recvtb: int | None, ch: int | None,
                line: int, file: str) -> None:
        if src.rank != dst.rank:
            if not self.topology.has_link(src.rank, dst.rank):
                raise ProgramError(f"{where(line, file)}no link from rank {src.rank} to rank {dst.rank} in topology "
                                   f"{self.topology.name}; route through a neighbour or use a topology with that link")
        elif src.buffer == dst.buffer and src.index < dst.end and dst.index < src.end:
            raise ProgramError(f"{where(line, file)}{op} from {src} to {dst}: source and destination overlap; "
                               "use a scratch buffer in between")
        hints = (_hint(sendtb, "sendtb", line, file), _hint(recvtb, "recvtb", line, file), _hint(ch, "ch", line, file))
        if op == REDUCE:
            for slot in (src, dst):
                missing = self.state.first_unwritten(slot)
                if missing is not None:
                    raise ProgramError(f"{where(line, file)}reduce of {src} into {dst}: rank {slot.rank} "
                                       f"{slot.buffer}[{missing}] holds no data (MSCCLang cannot reduce it either)")
        for piece, target in self.state.written_moves(src, dst) if op == COPY else [(src, dst)]:
            self._ops.append(ChunkOp(op, piece, target, *hints, line, file))
        if op == COPY:
            self.state.copy(src, dst)
        else:
            self.state.reduce(src, dst)
        self._bump(dst, line)

    def emit(self, op: str, src: Slot, dst: Slot, line: int = 0, file: str = "",
             hints: tuple[int | None, int | None, int | None] = NO_HINTS) -> None:
        """Record one op on resolved slots (no alias resolution; hints as (sendtb, recvtb, channel)): the path of
        generated programs (language/lower.py), which hold no references. The checks that generated ops can
        fail stay: the link, overlapping local slots, data in every slot read (symbolic execution), the scratch
        sizes, the hints."""
        if src.count == 1 and dst.count == 1 and self._emit_unit(op, src, dst, line, file, hints):
            return
        for slot in (src, dst) if op == REDUCE else (src,):
            missing = self.state.first_unwritten(slot)
            if missing is not None:
                raise ProgramError(f"{where(line, file)}{op} of {src} to {dst} reads rank {slot.rank} "
                                   f"{slot.buffer}[{missing}], which nobody wrote; copy data there first")
        if is_scratch(dst.buffer):
            named = self._scratch[dst.rank]
            named[dst.buffer] = max(named.get(dst.buffer, 0), dst.end)
        self._record(op, src, dst, *hints, line, file)

    def _emit_unit(self, op: str, src: Slot, dst: Slot, line: int, file: str,
                   hints: tuple[int | None, int | None, int | None]) -> bool:
        """`emit` of one chunk, the lowering's hot path (a million ops at 1024 ranks): the same checks, state
        updates and op as the general path, in fewer dictionary look-ups. False, with nothing changed, where a
        check fails: the general path then raises its message."""
        slots = self.state.slots
        value = slots.get((src.rank, src.buffer, src.index))
        key = (dst.rank, dst.buffer, dst.index)
        if value is None or (op == REDUCE and key not in slots) or (op != COPY and op != REDUCE):
            return False
        sendtb, recvtb, channel = hints
        if hints is not NO_HINTS and not ((sendtb is None or type(sendtb) is int and sendtb >= 0)  # noqa: E721
                                          and (recvtb is None or type(recvtb) is int and recvtb >= 0)  # noqa: E721
                                          and (channel is None or type(channel) is int and channel >= 0)):  # noqa: E721
            return False  # -1, bools and other integral types: the general path converts or refuses them
        if src.rank != dst.rank:
            if (src.rank, dst.rank) not in self._links:
                return False
        elif src.buffer == dst.buffer and src.index == dst.index:
            return False  # a local op onto its own source
        buffer = dst.buffer
        if buffer != INPUT and buffer != OUTPUT:  # a scratch buffer: at least as large as this slot
            named = self._scratch[dst.rank]
            if named.get(buffer, 0) <= dst.index:
                named[buffer] = dst.index + 1
        self._ops.append(chunk_op(op, src, dst, sendtb, recvtb, channel, line, file))
        slots[key] = value if op == COPY else tuple(sorted(slots[key] + value))
        if self._referenced:
            self._version[key] = self._version.get(key, 0) + 1
            self._written_at[key] = line
        return True

    def copy(self, ref: ChunkRef, dst: int, buffer: BufferLike | None = None, index: int | None = -1,
             sendtb: int | None = -1, recvtb: int | None = -1, ch: int | None = -1) -> ChunkRef:
        line, file = caller_location()
        self._check_fresh(ref, line, file)
        src = ref.slot
        if index is None:
            index = -1
        if buffer is None:
            name = src.buffer
            index = src.index if index == -1 else index
        else:
            name = buffer_name(buffer)
        if index == -1:
            if not is_scratch(name):
                raise ProgramError(f"{where(line, file)}copy to rank {dst} {name}: give the index to write")
            if isinstance(dst, int) and 0 <= dst < self.collective.num_ranks:
                index = self._scratch[dst].get(name, 0)  # MSCCLang: append to the scratch buffer
        target = self._slot(dst, name, index, src.count, line, file, creating=True,
                            alias_rank=None if buffer is None else src.rank)
        if target == src:
            return ref  # copying a chunk onto itself (common with inplace collectives) is a no-op
        if is_scratch(target.buffer):
            named = self._scratch[target.rank]
            named[target.buffer] = max(named.get(target.buffer, 0), target.end)
        self._record(COPY, src, target, sendtb, recvtb, ch, line, file)
        return ChunkRef(self, target, self._versions(target), line)

    def reduce(self, ref: ChunkRef, other: ChunkRef, sendtb: int | None = -1, recvtb: int | None = -1,
               ch: int | None = -1) -> ChunkRef:
        line, file = caller_location()
        if not isinstance(other, ChunkRef):
            raise ProgramError(f"{where(line, file)}reduce() takes a chunk reference, got {type(other).__name__}")
        self._check_fresh(ref, line, file)
        self._check_fresh(other, line, file)
        if other.slot.count != ref.slot.count:
            raise ProgramError(f"{where(line, file)}reduce of {other.slot} into {ref.slot}: sizes differ "
                               f"({other.slot.count} vs {ref.slot.count}); split or group the references")
        self._record(REDUCE, other.slot, ref.slot, sendtb, recvtb, ch, line, file)
        ref._versions = self._versions(ref.slot)  # the reference written through stays valid
        return ref

    # --- results -------------------------------------------------------------------------------
    @property
    def ops(self) -> tuple[ChunkOp, ...]:
        return tuple(self._ops)

    def build(self) -> Program:
        """The frozen Program traced so far (also handed to `collsynth compile` when it runs this file)."""
        program = Program(self.name, self.topology, self.collective, self.protocol, self.instances, self.options,
                          buffers=tuple(tuple(named.items()) for named in self._scratch), ops=tuple(self._ops))
        captured = CAPTURE.get()
        if captured is not None:
            captured.append(program)
        return program

    def check(self) -> list[str]:
        """Postcondition problems of the program so far, symbolically (empty list: it is correct)."""
        return check_postcondition(self.state)


class ChunkRef:
    """A reference to `size` consecutive chunks of one buffer of one rank (MSCCLang's Ref)."""

    __slots__ = ("_builder", "slot", "_versions", "_line")

    def __init__(self, builder: ProgramBuilder, slot: Slot, versions: tuple[int, ...], line: int) -> None:
        builder._referenced = True  # from now on every write bumps its slots' versions
        self._builder = builder
        self.slot = slot
        self._versions = versions
        self._line = line

    # MSCCLang's Ref fields
    @property
    def rank(self) -> int:
        return self.slot.rank

    @property
    def buffer(self) -> Buffer | str:
        return public_buffer(self.slot.buffer)

    @property
    def index(self) -> int:
        return self.slot.index

    @property
    def size(self) -> int:
        return self.slot.count

    def __repr__(self) -> str:
        return f"ChunkRef({self.slot})"

    def copy(self, dst: int, buffer: BufferLike | None = None, index: int | None = -1, sendtb: int | None = -1,
             recvtb: int | None = -1, ch: int | None = -1) -> ChunkRef:
        """Copy these chunks to rank `dst` at (buffer, index); default: same buffer and index. Returns the copy."""
        return self._builder.copy(self, dst, buffer, index, sendtb, recvtb, ch)

    def reduce(self, other: ChunkRef, sendtb: int | None = -1, recvtb: int | None = -1,
               ch: int | None = -1) -> ChunkRef:
        """self := self + other (other may live on a neighbour rank). Returns self, updated."""
        return self._builder.reduce(self, other, sendtb, recvtb, ch)

    def split(self, num: int) -> list[ChunkRef]:
        line, file = caller_location()
        self._builder._check_fresh(self, line, file)
        if not isinstance(num, int) or num < 1 or self.slot.count % num:
            raise ProgramError(f"{where(line, file)}cannot split {self.slot} ({self.slot.count} chunks) into "
                               f"{num} parts")
        part = self.slot.count // num
        s = self.slot
        return [ChunkRef(self._builder, Slot(s.rank, s.buffer, s.index + k * part, part),
                         self._versions[k * part:(k + 1) * part], line) for k in range(num)]

    def group(self, other: ChunkRef) -> ChunkRef:
        """One reference spanning both (same rank and buffer), as MSCCLang's group."""
        line, file = caller_location()
        b = self._builder
        b._check_fresh(self, line, file)
        b._check_fresh(other, line, file)
        if other.slot.rank != self.slot.rank or other.slot.buffer != self.slot.buffer:
            raise ProgramError(f"{where(line, file)}cannot group {self.slot} with {other.slot}: "
                               "they must be on the same rank and buffer")
        start = min(self.slot.index, other.slot.index)
        end = max(self.slot.end, other.slot.end)
        slot = Slot(self.slot.rank, self.slot.buffer, start, end - start)
        return ChunkRef(b, slot, b._versions(slot), line)

    # MSCCLang's chunk metadata helpers
    def _origin(self, index: int) -> tuple[int, int]:
        s = self.slot
        content = self._builder.state.slots.get((s.rank, s.buffer, s.index + index))
        if content is None or len(content) != 1:
            raise ProgramError(f"{s}: chunk {index} holds {self._builder.state.describe(content)}, not a single "
                               "input chunk; origin/destination are defined only for copied chunks")
        width = self._builder.collective.input_chunks
        return divmod(content[0], width)

    def get_origin_rank(self, index: int = 0) -> int:
        return self._origin(index)[0]

    def get_origin_index(self, index: int = 0) -> int:
        return self._origin(index)[1]

    def _destination(self, index: int) -> tuple[int, int]:
        coll = self._builder.collective
        rank, idx = self._origin(index)
        chunk = coll.input_chunk(rank, idx)
        if chunk is None:
            return -1, -1
        ranks = sorted(coll.post[chunk])
        indices = {coll.output_index(chunk, r) for r in ranks}
        return (ranks[0] if len(ranks) == 1 else -1), (indices.pop() if len(indices) == 1 else -1)

    def get_dst_rank(self, index: int = 0) -> int:
        """The rank this chunk must end on (-1 if several or none)."""
        return self._destination(index)[0]

    def get_dst_index(self, index: int = 0) -> int:
        """The output index this chunk must end at (-1 if it differs between ranks)."""
        return self._destination(index)[1]

    def print_chunk_info(self, index: int = 0) -> None:
        s, state = self.slot, self._builder.state
        print(f"{s}: {state.describe(state.slots.get((s.rank, s.buffer, s.index + index)))}")
