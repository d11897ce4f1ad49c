"""Executing a DSL program directly, on symbolic chunk contents.

Each slot `(rank, buffer, index)` holds a *content*: the sorted tuple of input contributions summed in
it, a contribution being `rank * input_chunks + input_index` (the chunk that `rank` holds in its input
buffer at `input_index` at the start). A copy moves a content; a reduce concatenates two (a multiset,
so a chunk counted twice shows up). `check_postcondition` compares the final contents with the
collective's postcondition; `evaluate` turns contents into numbers for given inputs, which is what
the interpreter must reproduce.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from collsynth.collectives import Collective
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.language.program import COPY, Program, Slot, alias_slot

Content = tuple[int, ...]


class SymbolicState:
    """The contents of every written slot; mutable, owned by one builder or one replay."""

    __slots__ = ("collective", "slots")

    def __init__(self, collective: Collective) -> None:
        self.collective = collective
        self.slots: dict[tuple[int, str, int], Content] = {}
        width = collective.input_chunks
        for _, rank, index in collective.inputs:
            buf, idx = alias_slot(collective, rank, INPUT, index)
            self.slots[(rank, buf, idx)] = (rank * width + index,)

    def first_unwritten(self, slot: Slot) -> int | None:
        """The first index of `slot` that holds no data yet, or None if all do."""
        slots = self.slots
        for index in range(slot.index, slot.end):
            if (slot.rank, slot.buffer, index) not in slots:
                return index
        return None

    def written_runs(self, slot: Slot) -> list[tuple[int, int]]:
        """The maximal runs (first index, count) of `slot` that hold data."""
        runs: list[tuple[int, int]] = []
        for index in range(slot.index, slot.end):
            if (slot.rank, slot.buffer, index) not in self.slots:
                continue
            if runs and runs[-1][0] + runs[-1][1] == index:
                runs[-1] = (runs[-1][0], runs[-1][1] + 1)
            else:
                runs.append((index, 1))
        return runs

    def written_moves(self, src: Slot, dst: Slot) -> list[tuple[Slot, Slot]]:
        """The (source, destination) pieces a copy of src to dst moves: its written runs. Its empty slots empty
        their destination (MSCCLang copies their None), so they need no data moved."""
        if self.first_unwritten(src) is None:
            return [(src, dst)]
        shift = dst.index - src.index
        return [(Slot(src.rank, src.buffer, first, count), Slot(dst.rank, dst.buffer, first + shift, count))
                for first, count in self.written_runs(src)]

    def copy(self, src: Slot, dst: Slot) -> None:
        """Copy every slot; an empty source slot empties its destination (MSCCLang copies the None)."""
        slots = self.slots
        values = [slots.get((src.rank, src.buffer, i)) for i in range(src.index, src.end)]
        for k, value in enumerate(values):
            if value is None:
                slots.pop((dst.rank, dst.buffer, dst.index + k), None)
            else:
                slots[(dst.rank, dst.buffer, dst.index + k)] = value

    def reduce(self, src: Slot, dst: Slot) -> None:
        slots = self.slots
        values = [slots[(src.rank, src.buffer, i)] for i in range(src.index, src.end)]
        for k, value in enumerate(values):
            key = (dst.rank, dst.buffer, dst.index + k)
            slots[key] = tuple(sorted(slots[key] + value))

    def content(self, rank: int, buffer: str, index: int) -> Content | None:
        buf, idx = alias_slot(self.collective, rank, buffer, index)
        return self.slots.get((rank, buf, idx))

    def describe(self, content: Content | None) -> str:
        if content is None:
            return "nothing"
        width = self.collective.input_chunks
        parts = [f"r{c // width}.input[{c % width}]" for c in content]
        return parts[0] if len(parts) == 1 else "sum(" + ", ".join(parts) + ")"


def run_symbolic(program: Program) -> SymbolicState:
    """Execute the program's ops in order (ops are assumed valid: see validate_program)."""
    coll = program.collective
    state = SymbolicState(coll)
    for op in program.ops:
        sbuf, sidx = alias_slot(coll, op.src.rank, op.src.buffer, op.src.index)
        dbuf, didx = alias_slot(coll, op.dst.rank, op.dst.buffer, op.dst.index)
        src = Slot(op.src.rank, sbuf, sidx, op.src.count)
        dst = Slot(op.dst.rank, dbuf, didx, op.dst.count)
        if op.op == COPY:
            state.copy(src, dst)
        else:
            state.reduce(src, dst)
    return state


def expected_content(collective: Collective, chunk: int) -> Content:
    """The content a combining collective's output slot for `chunk` must hold: every contribution once."""
    width = collective.input_chunks
    return tuple(sorted(r * width + collective.input_index(chunk, r) for r in collective.pre[chunk]))


def check_postcondition(state: SymbolicState, limit: int = 20) -> list[str]:
    """Problems with the final contents, one line each (at most `limit`); empty if the postcondition holds."""
    coll = state.collective
    width = coll.input_chunks
    problems: list[str] = []
    # Out-of-place outputs need no alias resolution; the look-ups are bound once (a million slots at 1024 ranks)
    # and a combining chunk's expected content is built once, not once per rank.
    slots, inplace, combining, input_chunk = state.slots, coll.inplace, coll.combining, coll.input_chunk
    expected: dict[int, Content] = {}
    # contribution -> the input chunk it is (input_chunk, as a list: one small array instead of a look-up per slot)
    chunk_of: list[int | None] = [input_chunk(c // width, c % width) for c in range(coll.num_ranks * width)]
    held = None if inplace else _output_contents(state)
    size = coll.output_chunks
    for chunk, rank, index in coll.outputs:
        if held is None:
            have = state.content(rank, OUTPUT, index)
        else:  # an index outside the buffer would name another rank's slot in `held`
            have = held[rank * size + index] if 0 <= index < size else slots.get((rank, OUTPUT, index))
        if combining:
            if chunk not in expected:
                expected[chunk] = expected_content(coll, chunk)
            ok = have == expected[chunk]
        else:
            ok = (have is not None and len(have) == 1
                  and (chunk_of[have[0]] if 0 <= have[0] < len(chunk_of) else None) == chunk)
        if not ok:
            want = (f"the sum of chunk {chunk} over ranks {sorted(coll.pre[chunk])}" if combining
                    else f"chunk {chunk}")
            problems.append(f"rank {rank} output[{index}] should hold {want} but holds {state.describe(have)}")
            if len(problems) >= limit:
                break
    return problems


def _output_contents(state: SymbolicState) -> list[Content | None]:
    """The content of every rank's output slots, at rank * output_chunks + index (None: unwritten): one pass over
    the slots in the order they were written, which at 1024 ranks (a million slots) is faster than a look-up per
    output slot."""
    coll = state.collective
    n, size = coll.num_ranks, coll.output_chunks
    held: list[Content | None] = [None] * (n * size)
    for (rank, buffer, index), content in state.slots.items():
        if buffer == OUTPUT and 0 <= index < size and 0 <= rank < n:
            held[rank * size + index] = content
    return held


def evaluate(state: SymbolicState, inputs: Sequence[np.ndarray], buffer: str = OUTPUT,
             size: int | None = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Numeric value of every slot of `buffer` per rank, for per-rank inputs of shape (input_chunks, elems).

    Returns per rank `(values, written)`: values of shape (size, elems) (zeros where unwritten) and a
    boolean mask of the written slots. Sums are taken in contribution order."""
    coll = state.collective
    width = coll.input_chunks
    if size is None:
        size = coll.output_chunks if buffer == OUTPUT else coll.input_chunks
    elems = inputs[0].shape[1]
    result = []
    for rank in range(coll.num_ranks):
        values = np.zeros((size, elems), dtype=inputs[0].dtype)
        written = np.zeros(size, dtype=bool)
        for index in range(size):
            content = state.content(rank, buffer, index)
            if content is None:
                continue
            acc = inputs[content[0] // width][content[0] % width].copy()
            for c in content[1:]:
                acc = acc + inputs[c // width][c % width]
            values[index] = acc
            written[index] = True
        result.append((values, written))
    return result
