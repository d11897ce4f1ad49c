"""MSCCLang's collective classes: `AllReduce`, `AllGather`, `AllToAll`, `ReduceScatter` with the
constructor `(num_ranks, chunk_factor, inplace)`, and the `Collective` base class for custom ones.

They are thin descriptions; `to_collective()` gives the collsynth `Collective` the compiler uses.
Layouts are MSCCLang's: AllReduce has `chunk_factor` chunks per rank (so AllReduce(8, 8, ...) is
collsynth's allreduce with 1 chunk per rank and 8 ranks), AllGather/AllToAll/ReduceScatter use
`chunk_factor` as collsynth's chunk factor.

A custom MSCCLang collective subclasses `Collective` and overrides `init_buffers()` (per rank a dict
`{Buffer.input: [Chunk | None, ...], Buffer.output: [...]}`) and `check(prog)`. Its precondition is
read from `init_buffers()`; its postcondition for the compiled IR from each `Chunk`'s
`dst_rank`/`dst_index` (dst_rank -1: every rank; dst_index -1: not checked), while `Check()` calls
the class's own `check(prog)` as MSCCLang does. A collsynth `Collective` (e.g. from
`collsynth.collectives.custom_collective`) may be passed to `MSCCLProgram` directly instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from collsynth.collectives import Collective as Spec
from collsynth.collectives import custom_collective, make_collective
from collsynth.language.buffers import OUTPUT, Buffer
from collsynth.language.program import ProgramError, alias_slot
from collsynth.language.symbolic import SymbolicState


@dataclass
class Chunk:
    """MSCCLang's description of an input chunk: where it starts and (optionally) must end."""

    origin_rank: int
    origin_index: int
    dst_rank: int = -1
    dst_index: int = -1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Chunk) and (self.origin_rank, self.origin_index) == (other.origin_rank,
                                                                                      other.origin_index)

    def __hash__(self) -> int:
        return hash((self.origin_rank, self.origin_index))

    def __lt__(self, other: Chunk) -> bool:
        return (self.origin_rank, self.origin_index) < (other.origin_rank, other.origin_index)

    def reduce(self, dst: int, chunk: Chunk | ReduceChunk) -> ReduceChunk:
        """MSCCLang: the sum of this chunk and `chunk`, created on rank `dst`."""
        if isinstance(chunk, ReduceChunk):
            return chunk.reduce(dst, self)
        return ReduceChunk(dst, [self, chunk])


@dataclass
class ReduceChunk:
    """MSCCLang's description of a sum of chunks; equal when the same chunks are summed."""

    creation_rank: int
    chunks: list[Chunk] = field(default_factory=list)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReduceChunk) and sorted(self.chunks) == sorted(other.chunks)

    def __hash__(self) -> int:
        return hash(tuple(sorted(self.chunks)))

    def reduce(self, dst: int, chunk: Chunk | ReduceChunk) -> ReduceChunk:
        more = chunk.chunks if isinstance(chunk, ReduceChunk) else [chunk]
        return ReduceChunk(self.creation_rank, self.chunks + list(more))

    def sort(self) -> None:
        self.chunks.sort()


class Collective:
    """MSCCLang's collective base class (subclass it for a custom collective)."""

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False, num_ranks_per_node: int = -1,
                 **kwargs: Any) -> None:
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = bool(inplace)
        self.name = "custom"
        # MSCCLang: ranks per node (-1: all in one node) and the number of chunk groups (MSCCL++ plans)
        self.num_ranks_per_node = num_ranks if num_ranks_per_node == -1 else num_ranks_per_node
        self.num_chunk_groups = kwargs.get("num_chunk_groups", 1)

    def init_buffers(self) -> Any:
        return None

    def check(self, prog: Any) -> Any:
        return None

    def get_buffer_index(self, rank: int, buffer: Any, index: int) -> tuple[Any, int]:
        return buffer, index

    def has_custom_check(self) -> bool:
        """Whether `check` is the program's own (a custom collective's), not one of MSCCLang's built-in ones
        (those are checked exactly against the postcondition instead)."""
        return type(self).check not in _BUILTIN_CHECKS

    def to_collective(self) -> Spec:
        """A custom collective from `init_buffers()` and the chunks' destinations."""
        buffers = self.init_buffers()
        if not buffers:
            raise ProgramError(f"custom collective {type(self).__name__}: init_buffers() must return one dict "
                               "{Buffer.input: [...], Buffer.output: [...]} per rank")
        ids: dict[tuple[int, int], int] = {}
        inputs, outputs = [], []
        n_in = n_out = 1
        for rank, named in enumerate(buffers):
            ins = list(named.get(Buffer.input) or [])
            n_in = max(n_in, len(ins))
            n_out = max(n_out, len(named.get(Buffer.output) or []))
            for index, item in enumerate(ins):
                if isinstance(item, Chunk):
                    cid = ids.setdefault((item.origin_rank, item.origin_index), len(ids))
                    inputs.append((cid, rank, index))
                    if item.dst_index >= 0:
                        ranks = range(self.num_ranks) if item.dst_rank < 0 else [item.dst_rank]
                        outputs += [(cid, r, item.dst_index) for r in ranks]
        if not outputs:
            raise ProgramError(f"custom collective {type(self).__name__}: no input Chunk names a destination; "
                               "give Chunk(origin_rank, origin_index, dst_rank, dst_index)")
        return custom_collective(self.name, self.num_ranks, inputs, sorted(set(outputs)), input_chunks=n_in,
                                 output_chunks=n_out, inplace=self.inplace)


class AllReduce(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False, num_ranks_per_node: int = -1,
                 **kwargs: Any) -> None:
        super().__init__(num_ranks, chunk_factor, inplace, num_ranks_per_node,
                         num_chunk_groups=kwargs.get("num_chunk_groups", num_ranks))
        self.name = "allreduce"

    def init_buffers(self) -> list[dict[Buffer, list[Any]]]:
        """Rank r starts with chunks (r, c), each bound for index c of every rank."""
        out = []
        for r in range(self.num_ranks):
            ins: list[Any] = [Chunk(r, c, -1, c) for c in range(self.chunk_factor)]
            out.append({Buffer.input: ins, Buffer.output: ins if self.inplace else [None] * self.chunk_factor})
        return out

    def check(self, prog: Any) -> bool:
        return _check_each(self, prog, Buffer.input if self.inplace else Buffer.output,
                           [(r, c, _sum_of(self.num_ranks, c)) for r in range(self.num_ranks)
                            for c in range(self.chunk_factor)])

    def get_buffer_index(self, rank: int, buffer: Any, index: int) -> tuple[Any, int]:
        return (Buffer.input, index) if self.inplace and buffer == Buffer.output else (buffer, index)

    def to_collective(self) -> Spec:
        n, cf = self.num_ranks, self.chunk_factor
        if cf % n == 0:
            return make_collective("allreduce", n, cf // n, inplace=self.inplace)
        slots = [(c, r, c) for c in range(cf) for r in range(n)]
        return custom_collective("allreduce", n, slots, slots, combining=True, input_chunks=cf, output_chunks=cf,
                                 inplace=self.inplace)


class AllGather(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False,
                 create_all_chunks: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "allgather"
        self.create_all_chunks = create_all_chunks

    def init_buffers(self) -> list[dict[Buffer, list[Any]]]:
        """Rank r's chunks (r, ch) go to output index r * chunk_factor + ch of every rank; in place, the input is
        that slice of the output. `create_all_chunks` (MSCCLang's flag) puts every rank's chunks in every
        output at the start."""
        n, cf = self.num_ranks, self.chunk_factor
        out = []
        for r in range(n):
            output: list[Any] = [None] * (n * cf)
            owners = range(n) if self.create_all_chunks else [r]
            for owner in owners:
                for ch in range(cf):
                    output[owner * cf + ch] = Chunk(owner, ch, -1, owner * cf + ch)
            if self.inplace:
                ins = output[r * cf:(r + 1) * cf]
            else:
                ins = [Chunk(r, ch, -1, r * cf + ch) for ch in range(cf)]
                output = output if self.create_all_chunks else [None] * (n * cf)
            out.append({Buffer.input: ins, Buffer.output: output})
        return out

    def check(self, prog: Any) -> bool:
        n, cf = self.num_ranks, self.chunk_factor
        return _check_each(self, prog, Buffer.output, [(r, i * cf + ch, Chunk(i, ch)) for r in range(n)
                                                       for i in range(n) for ch in range(cf)])

    def get_buffer_index(self, rank: int, buffer: Any, index: int) -> tuple[Any, int]:
        if self.inplace and buffer == Buffer.input:
            return Buffer.output, index + rank * self.chunk_factor
        return buffer, index

    def to_collective(self) -> Spec:
        return make_collective("allgather", self.num_ranks, self.chunk_factor, inplace=self.inplace)


class AllToAll(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "alltoall"

    def init_buffers(self) -> list[dict[Buffer, list[Any]]]:
        """Rank r's chunk at index i goes to rank i // chunk_factor, index i % chunk_factor + r * chunk_factor."""
        n, cf = self.num_ranks, self.chunk_factor
        out = []
        for r in range(n):
            ins: list[Any] = [Chunk(r, i, i // cf, i % cf + r * cf) for i in range(n * cf)]
            out.append({Buffer.input: ins, Buffer.output: ins if self.inplace else [None] * (n * cf)})
        return out

    def check(self, prog: Any) -> bool:
        n, cf = self.num_ranks, self.chunk_factor
        return _check_each(self, prog, Buffer.output, [(r, i * cf + ch, Chunk(i, ch + r * cf)) for r in range(n)
                                                       for i in range(n) for ch in range(cf)])

    def to_collective(self) -> Spec:
        return make_collective("alltoall", self.num_ranks, self.chunk_factor, inplace=self.inplace)


class ReduceScatter(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "reduce_scatter"

    def init_buffers(self) -> list[dict[Buffer, list[Any]]]:
        """Rank r's chunk at index i * chunk_factor + c is summed into index c of rank i (in place: index
        i * chunk_factor + c of its input)."""
        n, cf = self.num_ranks, self.chunk_factor
        out = []
        for r in range(n):
            ins: list[Any] = [Chunk(r, i * cf + c, i, c) for i in range(n) for c in range(cf)]
            out.append({Buffer.input: ins} if self.inplace else {Buffer.input: ins, Buffer.output: [None] * cf})
        return out

    def check(self, prog: Any) -> bool:
        n, cf = self.num_ranks, self.chunk_factor
        buf = Buffer.input if self.inplace else Buffer.output
        return _check_each(self, prog, buf, [(r, (r * cf + c) if self.inplace else c, _sum_of(n, r * cf + c))
                                             for r in range(n) for c in range(cf)])

    def get_buffer_index(self, rank: int, buffer: Any, index: int) -> tuple[Any, int]:
        if self.inplace and buffer == Buffer.output:
            return Buffer.input, index + rank * self.chunk_factor
        return buffer, index

    def to_collective(self) -> Spec:
        return make_collective("reducescatter", self.num_ranks, self.chunk_factor, inplace=self.inplace)


class SendRecv(Collective):
    """MSCCLang's two-rank exchange: each rank's chunks end at the same indices of the other rank."""

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        if num_ranks != 2:
            raise ProgramError(f"SendRecv is between 2 ranks, got {num_ranks}")
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "sendrecv"

    def init_buffers(self) -> list[dict[Buffer, list[Any]]]:
        return [{Buffer.input: [Chunk(r, c, 1 - r, c) for c in range(self.chunk_factor)],
                 Buffer.output: [None] * self.chunk_factor} for r in range(2)]

    def check(self, prog: Any) -> bool:
        return _check_each(self, prog, Buffer.input if self.inplace else Buffer.output,
                           [(r, c, Chunk(1 - r, c)) for r in range(2) for c in range(self.chunk_factor)])

    def get_buffer_index(self, rank: int, buffer: Any, index: int) -> tuple[Any, int]:
        return (Buffer.input, index) if self.inplace and buffer == Buffer.output else (buffer, index)


class Broadcast(Collective):
    """MSCCL++'s Broadcast (mscclpp python/mscclpp/language/collectives.py, `Broadcast(num_ranks,
    chunk_factor, inplace, root)`): the root's `chunk_factor` input chunks end at the same indices of every
    rank's output. Two upstream quirks are not copied: in place, its init_buffers() marks every rank as
    holding the root's chunks already (here only the root holds them), and its check() looks at rank 0's
    output for every rank (here every rank's output is checked)."""

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool, root: int) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        if not isinstance(root, int) or not 0 <= root < num_ranks:
            raise ProgramError(f"Broadcast: root {root!r} is outside 0..{num_ranks - 1}")
        self.name = "broadcast"
        self.root = root

    def init_buffers(self) -> list[dict[Buffer, list[Any]]]:
        cf = self.chunk_factor
        out = []
        for r in range(self.num_ranks):
            ins: list[Any] = [Chunk(self.root, ch, -1, ch) if r == self.root else None for ch in range(cf)]
            out.append({Buffer.input: ins, Buffer.output: ins if self.inplace else [None] * cf})
        return out

    def check(self, prog: Any) -> bool:
        return _check_each(self, prog, Buffer.output, [(r, ch, Chunk(self.root, ch)) for r in range(self.num_ranks)
                                                       for ch in range(self.chunk_factor)])

    def to_collective(self) -> Spec:
        return make_collective("broadcast", self.num_ranks, self.chunk_factor, root=self.root, inplace=self.inplace)


def _sum_of(num_ranks: int, index: int) -> ReduceChunk:
    return ReduceChunk(-1, [Chunk(r, index) for r in range(num_ranks)])


def _check_each(coll: Collective, prog: Any, buffer: Buffer, expected: list[tuple[int, int, Any]]) -> bool:
    """MSCCLang's check: every (rank, index) of `buffer` holds the expected chunk; prints each one that does not."""
    correct = True
    for rank, index, want in expected:
        have = prog.buffers[rank][buffer][index]
        if have is None or have != want:
            print(f"Rank {rank} chunk {index} of {buffer.name} is incorrect: should be {want}, given {have}")
            correct = False
    return correct


_BUILTIN_CHECKS = {Collective.check, AllReduce.check, AllGather.check, AllToAll.check, Broadcast.check,
                   ReduceScatter.check, SendRecv.check}


def as_collective(collective: Spec | Collective) -> Spec:
    """A collsynth Collective from either kind of description."""
    if isinstance(collective, Spec):
        return collective
    if isinstance(collective, Collective):
        return collective.to_collective()
    raise ProgramError(f"expected a collective (e.g. AllReduce(8, 8, False)), got {type(collective).__name__}")


class CompatView:
    """What a custom MSCCLang collective's `check(prog)` reads: `prog.buffers[rank][Buffer.output][i]`
    as Chunk / ReduceChunk / None."""

    def __init__(self, state: SymbolicState) -> None:
        coll = state.collective
        width = coll.input_chunks

        def describe(content: tuple[int, ...] | None) -> Chunk | ReduceChunk | None:
            if content is None:
                return None
            chunks = [Chunk(c // width, c % width) for c in content]
            return chunks[0] if len(chunks) == 1 else ReduceChunk(-1, chunks)

        self.buffers = []
        for rank in range(coll.num_ranks):
            out = [describe(state.content(rank, OUTPUT, i)) for i in range(coll.output_chunks)]
            ins = [describe(state.slots.get((rank, *alias_slot(coll, rank, "input", i))))
                   for i in range(coll.input_chunks)]
            self.buffers.append({Buffer.output: out, Buffer.input: ins})
