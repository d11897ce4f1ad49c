"""MSCCLang's MSCCL++ half (`msccl.language.mscclpp` of Azure/msccl-tools): `MSCCLPPProgram`, its `Ref` with
`put/put_packet/get/signal/wait/flush/copy/copy_packet/reduce/reduce_packet`, lowered to collsynth's MSCCL++
0.9.x execution plan (the same format collsynth.emit.mscclpp writes, checked by collsynth.runtime.plan).

Semantics, as MSCCLang's MSCCL++ DSL defines them (our code):
* every op runs on the threadblock the program names (`sendtb` for put/signal/flush/copy, `recvtb` for
  get/wait/reduce; -1 means threadblock 0), in program order;
* channels pair in threadblock order: the k-th threadblock of rank a that uses a channel of a type to rank b
  holds a's k-th such channel, the partner of b's k-th channel to a (so a `signal` on it is taken by a `wait`
  on the k-th of b's threadblocks that use a channel to a); MSCCLang's programs mostly use the same
  threadblock index on both sides, which this pairs;
* `put(dst, buffer, index)` writes this chunk into rank dst's buffer (no buffer and index: the same place
  as here; a scratch buffer and no index: appended); `get(src, ...)` reads rank src's chunk into this one;
  `reduce(other)` adds `other` in (a remote `other` is read through the channel); `put_packet` writes LL
  packets into the peer, which it reads with `copy_packet` / `reduce_packet` (no signal needed);
* an index into an in-place collective's buffer resolves with the rank that owns the chunk (MSCCLang's
  `get_ref(rank, ...)` calls `get_buffer_index(rank, ...)`);
* instruction fusion: a put followed by a signal on the same channel becomes `pws` (and `pwsf` when a flush
  follows on a port channel); other fusions of MSCCLang's optimizer are not done (the plan is equivalent);
* `instances`: the ops are repeated per instance on threadblocks `tb * instances + k` with chunk indices by
  the ReplicationPolicy (types.py); `packed` is refused.
Every named scratch buffer of a rank gets its own range of the plan's one scratch buffer.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from collsynth.collectives import Collective as Spec
from collsynth.language.buffers import INPUT, OUTPUT, Buffer, BufferLike, buffer_name, is_scratch
from collsynth.language.collectives import Collective, as_collective
from collsynth.language.context import OPEN_PROGRAM, open_program
from collsynth.language.mscclpp_plan import DslOp, lower_plan
from collsynth.language.program import ProgramError, Slot, alias_slot, buffer_size
from collsynth.language.symbolic import SymbolicState
from collsynth.language.types import PLAN_CHANNEL, ChannelType, DataFormat, ReplicationPolicy
from collsynth.topologies import Topology, fully_connected

CURRENT_MSCCLPP: ContextVar[MSCCLPPProgram | None] = ContextVar("collsynth_mscclpp_program", default=None)


class MSCCLPPProgram:
    """`with MSCCLPPProgram(name, topology, collective, instances, protocol, ...):` then `chunk()` and `Json()`.
    `topology` may also be the rank count, as newer MSCCLang versions pass it (then any rank reaches any other)."""

    def __init__(self, name: str, topo: Topology | int, collective: Spec | Collective, instances: int = 1,
                 protocol: str = "Simple", instr_fusion: bool = True,
                 replication_policy: ReplicationPolicy = ReplicationPolicy.duplicated,
                 num_threads_per_block: int = 1024, use_double_scratch_buffer: bool = False,
                 min_message_size: int = 0, max_message_size: int = 2**64 - 1) -> None:
        if protocol not in ("Simple", "LL"):
            raise ProgramError(f"MSCCLPPProgram {name!r}: protocol {protocol!r}; MSCCL++ programs run Simple or LL")
        if replication_policy is ReplicationPolicy.packed:
            raise ProgramError(f"MSCCLPPProgram {name!r}: ReplicationPolicy.packed is not supported; use "
                               "interleaved or duplicated")
        if not isinstance(instances, int) or instances < 1:
            raise ProgramError(f"MSCCLPPProgram {name!r}: instances must be an integer >= 1, got {instances!r}")
        if isinstance(topo, int):  # newer MSCCLang passes the rank count: every rank reaches every other
            topo = fully_connected(topo)
        self.name, self.topo, self.instances, self.protocol = name, topo, instances, protocol
        self.compat = collective if isinstance(collective, Collective) else None
        self.collective = collective  # MSCCLang's prog.collective: the object given
        self.spec = as_collective(collective)  # what the plan computes
        self.num_ranks = self.spec.num_ranks
        if topo.num_ranks != self.num_ranks:
            raise ProgramError(f"MSCCLPPProgram {name!r}: topology {topo.name} has {topo.num_ranks} ranks but the "
                               f"collective has {self.num_ranks}")
        self.instr_fusion = instr_fusion
        self.replication_policy: ReplicationPolicy = replication_policy
        self.num_threads_per_block = num_threads_per_block
        self.use_double_scratch_buffer = use_double_scratch_buffer or protocol == "LL"
        self.min_message_size, self.max_message_size = min_message_size, max_message_size
        self.state = SymbolicState(self.spec)
        self.scratch: list[dict[str, int]] = [{} for _ in range(self.num_ranks)]
        self.tbs: dict[tuple[int, int], list[DslOp]] = {}
        self._token: Any = None
        self._open: Any = None

    @property
    def buffers(self) -> list[dict[Buffer, list[Any]]]:
        """MSCCLang's `prog.buffers` (input and output chunks traced so far), as `check(prog)` reads them."""
        from collsynth.language.collectives import CompatView

        return CompatView(self.state).buffers

    def __enter__(self) -> MSCCLPPProgram:
        self._open = open_program(self.name)
        self._token = CURRENT_MSCCLPP.set(self)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self._token is not None:
            CURRENT_MSCCLPP.reset(self._token)
            OPEN_PROGRAM.reset(self._open)
            self._token = None

    # --- references -------------------------------------------------------------------------------
    def slot(self, rank: int, buffer: BufferLike | None, index: int, size: int, *, creating: bool) -> Slot:
        """The canonical slot of (rank, buffer, index, size): in-place aliasing with the owner's rank, bounds."""
        if not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise ProgramError(f"rank {rank!r} is outside 0..{self.num_ranks - 1}")
        try:
            name = buffer_name(buffer if buffer is not None else Buffer.scratch)
        except TypeError as exc:
            raise ProgramError(str(exc)) from None
        if not isinstance(index, int) or index < 0 or not isinstance(size, int) or size < 1:
            raise ProgramError(f"rank {rank} {name}[{index!r}] size {size!r}: index must be >= 0 and size >= 1")
        name, index = alias_slot(self.spec, rank, name, index)
        if is_scratch(name):
            have = self.scratch[rank].get(name, 0)
            if creating:
                self.scratch[rank][name] = max(have, index + size)
            elif index + size > have:
                raise ProgramError(f"rank {rank} scratch buffer {name!r} has {have} chunks; [{index}:{index + size}] "
                                   "reads past it (put or copy into it first)")
        elif index + size > buffer_size(self.spec, name):
            raise ProgramError(f"{name}[{index}:{index + size}] is outside rank {rank}'s {name} buffer "
                               f"({buffer_size(self.spec, name)} chunks)")
        return Slot(rank, name, index, size)

    def get_ref(self, rank: int, buffer: BufferLike, index: int, size: int = 1, partial: bool = False) -> Ref:
        """A reference to `size` chunks at (rank, buffer, index); they must hold data. partial: only the first
        (MSCCLang's and mscclpp's chunk(): later empty slots travel along and empty their destination)."""
        slot = self.slot(rank, buffer, index, size, creating=False)
        missing = self.state.first_unwritten(Slot(slot.rank, slot.buffer, slot.index, 1) if partial else slot)
        if missing is not None:
            raise ProgramError(f"chunk({rank}, {slot.buffer}, {index}) reads rank {rank} {slot.buffer}[{missing}], "
                               "which nobody wrote; write data there first")
        return Ref(self, slot)

    def holds_data(self, rank: int, buffer: BufferLike, index: int) -> bool:
        """Whether (rank, buffer, index) holds data yet; a rank, buffer or index outside the program raises."""
        return self.state.first_unwritten(self.slot(rank, buffer, index, 1, creating=False)) is None

    def target(self, ref: Ref, rank: int, buffer: BufferLike | None, index: int) -> Slot:
        """Where an op that names (rank, buffer, index) lands, with MSCCLang's defaults for the omitted parts."""
        if buffer is None and index == -1:
            return self.slot(rank, ref.slot.buffer, ref.slot.index, ref.size, creating=True)
        if buffer is None:
            raise ProgramError(f"{ref}: an index ({index}) needs a buffer")
        if index == -1:
            name = buffer_name(buffer)
            if not is_scratch(name):
                raise ProgramError(f"{ref}: name the index in the {name} buffer")
            index = self.scratch[rank].get(name, 0)
        return self.slot(rank, buffer, index, ref.size, creating=True)

    def require_link(self, src: int, dst: int) -> None:
        if src != dst and not self.topo.link(src, dst):
            raise ProgramError(f"no link from rank {src} to rank {dst} in topology {self.topo.name}")

    def record(self, rank: int, tb: int, op: DslOp) -> None:
        if not isinstance(tb, int) or tb < -1:
            raise ProgramError(f"threadblock {tb!r}: give an integer >= 0 (or -1 for threadblock 0)")
        self.tbs.setdefault((rank, max(tb, 0)), []).append(op)

    def get_rank_ref(self, rank: int) -> RankRef:
        if not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise ProgramError(f"rank {rank!r} is outside 0..{self.num_ranks - 1}")
        return RankRef(rank, self)

    def check(self) -> bool:
        """MSCCLang's check: the collective's own `check(prog)` for a custom one, else the postcondition on the
        traced chunks (prints what is wrong)."""
        from collsynth.language.collectives import CompatView
        from collsynth.language.symbolic import check_postcondition

        if self.compat is not None and self.compat.has_custom_check():
            return bool(self.compat.check(CompatView(self.state)))
        problems = check_postcondition(self.state)
        for line in problems:
            print(line)
        return not problems

    def lower(self) -> dict[str, Any]:
        """MSCCLang's lower(): the execution plan (not yet checked; generate_json() checks it)."""
        return self.to_plan()

    def generate_json(self) -> str:
        """MSCCLang's generate_json(): the plan as JSON text, not yet run (as generate_xml() is not); `Json()`
        and `Check()` run it in the plan interpreter first."""
        return json.dumps(self.to_plan(), indent=2) + "\n"

    def to_plan(self) -> dict[str, Any]:
        """The MSCCL++ execution plan (JSON-ready) of the traced program; check it with the plan interpreter."""
        return lower_plan(self)


@dataclass
class RankRef:
    """MSCCLang's `rank(r)`: rank-wide operations of an MSCCL++ program."""

    rank: int
    prog: MSCCLPPProgram

    def barrier(self, tb_list: list[int]) -> None:
        """Every threadblock in `tb_list` waits here until all of them have arrived."""
        tbs = tuple(sorted(set(tb_list)))
        if not tbs or any(not isinstance(t, int) or t < 0 for t in tbs):
            raise ProgramError(f"rank {self.rank}: barrier needs a list of threadblock ids >= 0, got {tb_list!r}")
        for tb in tbs:
            self.prog.record(self.rank, tb, DslOp("barrier", "none", None, barrier=tbs))


def rank(rank: int) -> RankRef:
    """MSCCLang: the open MSCCLPPProgram's rank `rank` (for `rank(r).barrier(tb_list)`)."""
    program = CURRENT_MSCCLPP.get()
    if program is None:
        raise ProgramError("rank() needs an open program: call it inside `with MSCCLPPProgram(...):`")
    return program.get_rank_ref(rank)


def _operand(slot: Slot) -> tuple[int, str, int, int]:
    return slot.rank, slot.buffer, slot.index, slot.count


class Ref:
    """MSCCLang's MSCCL++ chunk reference: `size` chunks at (rank, buffer, index)."""

    def __init__(self, prog: MSCCLPPProgram, slot: Slot) -> None:
        self.prog, self.slot = prog, slot

    rank = property(lambda self: self.slot.rank)
    index = property(lambda self: self.slot.index)
    size = property(lambda self: self.slot.count)

    @property
    def buffer(self) -> Buffer | str:
        name = self.slot.buffer
        return {INPUT: Buffer.input, OUTPUT: Buffer.output, "scratch": Buffer.scratch}.get(name, name)

    def __repr__(self) -> str:
        return f"Ref(Buffer:{self.buffer}, Index:{self.index}, Size:{self.size}, Rank:{self.rank})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Ref) and other.slot == self.slot

    def __hash__(self) -> int:
        return hash(self.slot)

    def split(self, num: int) -> list[Ref]:
        if num < 1 or self.size % num:
            raise ProgramError(f"{self}: cannot split {self.size} chunks into {num} parts")
        part = self.size // num
        return [Ref(self.prog, Slot(self.rank, self.slot.buffer, self.index + k * part, part)) for k in range(num)]

    def group(self, other: Ref) -> Ref:
        if (self.rank, self.slot.buffer) != (other.rank, other.slot.buffer):
            raise ProgramError(f"cannot group {self} and {other}: different ranks or buffers")
        start = min(self.index, other.index)
        end = max(self.slot.end, other.slot.end)
        return Ref(self.prog, Slot(self.rank, self.slot.buffer, start, end - start))

    # --- remote ops -------------------------------------------------------------------------------
    def _remote(self, peer: int, verb: str) -> None:
        if peer == self.rank:
            raise ProgramError(f"{self}: cannot {verb} the same rank")
        self.prog.require_link(self.rank, peer)

    def _put(self, dst: int, buffer: BufferLike | None, index: int, sendtb: int, chan_type: ChannelType,
             packet: bool) -> Ref:
        self._remote(dst, "put to")
        target = self.prog.target(self, dst, buffer, index)
        for src, dst_slot in self.prog.state.written_moves(self.slot, target):
            self.prog.record(self.rank, sendtb, DslOp("ppkt" if packet else "put", PLAN_CHANNEL[chan_type], dst,
                                                      [_operand(src)], [_operand(dst_slot)]))
        self.prog.state.copy(self.slot, target)
        return Ref(self.prog, target)

    def put(self, dst: int, buffer: BufferLike | None = None, index: int = -1, sendtb: int = -1,
            chan_type: ChannelType = ChannelType.sm) -> Ref:
        return self._put(dst, buffer, index, sendtb, chan_type, False)

    def put_packet(self, dst: int, buffer: BufferLike | None = None, index: int = -1, sendtb: int = -1,
                   chan_type: ChannelType = ChannelType.sm, temp_buffer: BufferLike | None = None,
                   temp_buffer_index: int = -1, *, src_format: DataFormat = DataFormat.raw) -> Ref:
        """LL packets into rank dst; `src_format=DataFormat.packet` (MSCCL++'s DSL) forwards packets that arrived
        here as they are (read-put-packet) instead of packing data."""
        if src_format is DataFormat.packet:
            if chan_type is ChannelType.proxy:
                raise ProgramError(f"{self}: put_packet of packet-format data over a proxy (port) channel is not "
                                   "supported; forward packets over a memory (sm) channel")
            self._remote(dst, "put to")
            target = self.prog.target(self, dst, buffer, index)
            for src, dst_slot in self.prog.state.written_moves(self.slot, target):
                self.prog.record(self.rank, sendtb, DslOp("rppkt", PLAN_CHANNEL[chan_type], dst, [_operand(src)],
                                                          [_operand(dst_slot)]))
            self.prog.state.copy(self.slot, target)
            return Ref(self.prog, target)
        ref = self
        if chan_type is ChannelType.proxy:  # a port channel DMAs bytes: turn the data into packets here first
            if temp_buffer is None:
                raise ProgramError(f"{self}: put_packet over a proxy channel needs temp_buffer")
            ref = self._local_copy(self.rank, temp_buffer, temp_buffer_index, sendtb, "cpkt")
        return ref._put(dst, buffer, index, sendtb, chan_type, True)

    def get(self, src: int, buffer: BufferLike | None = None, index: int = -1, recvtb: int = -1,
            chan_type: ChannelType = ChannelType.sm) -> None:
        self._remote(src, "get from")
        source = self.prog.target(self, src, buffer, index)
        if self.prog.state.first_unwritten(Slot(source.rank, source.buffer, source.index, 1)) is not None:
            raise ProgramError(f"{self}: get from rank {src} {source} reads a first chunk nobody wrote")
        for piece, dst_slot in self.prog.state.written_moves(source, self.slot):
            self.prog.record(self.rank, recvtb, DslOp("get", PLAN_CHANNEL[chan_type], src, [_operand(piece)],
                                                      [_operand(dst_slot)]))
        self.prog.state.copy(source, self.slot)

    def _sync(self, name: str, peer: int, tb: int, chan_type: ChannelType) -> None:
        self._remote(peer, name)
        self.prog.record(self.rank, tb, DslOp(name, PLAN_CHANNEL[chan_type], peer))

    def signal(self, dst: int, buffer: BufferLike | None = None, index: int = -1, sendtb: int = -1,
               chan_type: ChannelType = ChannelType.sm) -> None:
        self._sync("signal", dst, sendtb, chan_type)

    def wait(self, src: int, buffer: BufferLike | None = None, index: int = -1, recvtb: int = -1,
             chan_type: ChannelType = ChannelType.sm) -> None:
        self._sync("wait", src, recvtb, chan_type)

    def flush(self, dst: int, buffer: BufferLike | None = None, index: int = -1, sendtb: int = -1,
              chan_type: ChannelType = ChannelType.proxy) -> None:
        if chan_type is not ChannelType.proxy:
            raise ProgramError(f"{self}: flush is for proxy channels only")
        self._sync("flush", dst, sendtb, chan_type)

    # --- local ops --------------------------------------------------------------------------------
    def _local_copy(self, dst: int, buffer: BufferLike | None, index: int, sendtb: int, name: str) -> Ref:
        if dst != self.rank:
            raise ProgramError(f"{self}: copy only moves chunks inside rank {self.rank}; use put to reach rank {dst}")
        target = self.prog.target(self, dst, buffer, index)
        if target == self.slot:
            return self
        for src, dst_slot in self.prog.state.written_moves(self.slot, target):
            self.prog.record(self.rank, sendtb, DslOp(name, "none", None, [_operand(src)], [_operand(dst_slot)]))
        self.prog.state.copy(self.slot, target)
        return Ref(self.prog, target)

    def copy(self, dst: int, buffer: BufferLike | None = None, index: int = -1, sendtb: int = -1) -> Ref:
        return self._local_copy(dst, buffer, index, sendtb, "copy")

    def copy_packet(self, dst: int, buffer: BufferLike | None = None, index: int = -1, sendtb: int = -1) -> Ref:
        return self._local_copy(dst, buffer, index, sendtb, "upkt")

    def _reduce(self, other: Ref, recvtb: int, chan_type: ChannelType, packet: bool) -> Ref:
        if other.size != self.size:
            raise ProgramError(f"{self}: cannot reduce {other} of another size into it")
        if packet and other.rank != self.rank:
            raise ProgramError(f"{self}: reduce_packet reads packets on this rank; {other} is on rank {other.rank}")
        self.prog.require_link(other.rank, self.rank)
        for operand in (other.slot, self.slot):  # a sum needs both sides; an empty slot has nothing to add
            missing = self.prog.state.first_unwritten(operand)
            if missing is not None:
                raise ProgramError(f"{self}: reduce of {other} reads rank {operand.rank} {operand.buffer}[{missing}], "
                                   "which holds no data; reduce only written chunks")
        self.prog.state.reduce(other.slot, self.slot)
        remote = other.rank != self.rank
        name = "repkt" if packet else ("rre" if remote else "re")
        op = DslOp(name, PLAN_CHANNEL[chan_type] if remote else "none", other.rank if remote else None,
                   [_operand(self.slot), _operand(other.slot)], [_operand(self.slot)])
        self.prog.record(self.rank, recvtb, op)
        return self

    def reduce(self, other_chunkref: Ref, recvtb: int = -1, channel_type: ChannelType = ChannelType.sm) -> Ref:
        return self._reduce(other_chunkref, recvtb, channel_type, False)

    def reduce_packet(self, other_chunkref: Ref, recvtb: int = -1) -> Ref:
        return self._reduce(other_chunkref, recvtb, ChannelType.none, True)

    def group_load_reduce(self, other_chunkrefs: list[Ref], recvtb: int = -1,
                          chan_type: ChannelType = ChannelType.nvls) -> None:
        raise ProgramError("group_load_reduce (NVLS) is not lowered by collsynth's MSCCL++ DSL face; collsynth "
                           "writes switch-channel plans from collsynth.algorithms.mscclpp")

    def group_store(self, dsts: list[int], index: int = -1, buffer: BufferLike | None = None, sendtb: int = -1,
                    chan_type: ChannelType = ChannelType.nvls) -> None:
        raise ProgramError("group_store (NVLS) is not lowered by collsynth's MSCCL++ DSL face; collsynth writes "
                           "switch-channel plans from collsynth.algorithms.mscclpp")

    # --- chunk metadata ---------------------------------------------------------------------------
    def _origin(self, index: int) -> tuple[int, int]:
        content = self.prog.state.slots.get((self.rank, self.slot.buffer, self.index + index))
        if content is None or len(content) != 1:
            raise ProgramError(f"{self}: chunk {index} holds {self.prog.state.describe(content)}, not one input chunk")
        return divmod(content[0], self.prog.spec.input_chunks)

    def get_origin_rank(self, index: int = 0) -> int:
        return self._origin(index)[0]

    def get_origin_index(self, index: int = 0) -> int:
        return self._origin(index)[1]

    def _destination(self, index: int) -> tuple[int, int]:
        coll = self.prog.spec
        chunk = coll.input_chunk(*self._origin(index))
        if chunk is None:
            return -1, -1
        ranks = sorted(coll.post[chunk])
        indices = {coll.output_index(chunk, r) for r in ranks}
        return (ranks[0] if len(ranks) == 1 else -1), (indices.pop() if len(indices) == 1 else -1)

    def get_dst_rank(self, index: int = 0) -> int:
        return self._destination(index)[0]

    def get_dst_index(self, index: int = 0) -> int:
        return self._destination(index)[1]

    def print_chunk_info(self, index: int = 0) -> None:
        content = self.prog.state.slots.get((self.rank, self.slot.buffer, self.index + index))
        print(f"{self.slot}: {self.prog.state.describe(content)}")


def current_mscclpp() -> MSCCLPPProgram | None:
    return CURRENT_MSCCLPP.get()


__all__ = ["ChannelType", "DslOp", "MSCCLPPProgram", "RankRef", "Ref", "ReplicationPolicy", "current_mscclpp",
           "rank"]
