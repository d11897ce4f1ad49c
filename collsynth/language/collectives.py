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


class Collective:
    """MSCCLang's collective base class (subclass it for a custom collective)."""

    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        self.num_ranks = num_ranks
        self.chunk_factor = chunk_factor
        self.inplace = bool(inplace)
        self.name = "custom"

    def init_buffers(self) -> Any:
        return None

    def check(self, prog: Any) -> Any:
        return None

    def get_buffer_index(self, rank: int, buffer: Any, index: int) -> tuple[Any, int]:
        return buffer, index

    def has_custom_check(self) -> bool:
        return type(self).check is not Collective.check

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
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "allreduce"

    def to_collective(self) -> Spec:
        n, cf = self.num_ranks, self.chunk_factor
        if cf % n == 0:
            return make_collective("allreduce", n, cf // n, inplace=self.inplace)
        slots = [(c, r, c) for c in range(cf) for r in range(n)]
        return custom_collective("allreduce", n, slots, slots, combining=True, input_chunks=cf, output_chunks=cf,
                                 inplace=self.inplace)


class AllGather(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "allgather"

    def to_collective(self) -> Spec:
        return make_collective("allgather", self.num_ranks, self.chunk_factor, inplace=self.inplace)


class AllToAll(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "alltoall"

    def to_collective(self) -> Spec:
        return make_collective("alltoall", self.num_ranks, self.chunk_factor, inplace=self.inplace)


class ReduceScatter(Collective):
    def __init__(self, num_ranks: int, chunk_factor: int, inplace: bool = False) -> None:
        super().__init__(num_ranks, chunk_factor, inplace)
        self.name = "reduce_scatter"

    def to_collective(self) -> Spec:
        return make_collective("reducescatter", self.num_ranks, self.chunk_factor, inplace=self.inplace)


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
