"""`check_postcondition` reads the output slots in one pass over the written slots (issue 10: a million slots at
1024 ranks); it reports exactly what a look-up per output slot reported, for any state."""

from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.language.buffers import OUTPUT
from collsynth.language.program import alias_slot
from collsynth.language.symbolic import Content, SymbolicState, check_postcondition, expected_content


def _check_by_lookups(state: SymbolicState, limit: int = 20) -> list[str]:
    """The check as it was: one dictionary look-up per output slot (the reference)."""
    coll = state.collective
    width = coll.input_chunks
    problems: list[str] = []
    chunk_of = [coll.input_chunk(c // width, c % width) for c in range(coll.num_ranks * width)]
    for chunk, rank, index in coll.outputs:
        have = state.content(rank, OUTPUT, index) if coll.inplace else state.slots.get((rank, OUTPUT, index))
        if coll.combining:
            ok = have == expected_content(coll, chunk)
        else:
            ok = (have is not None and len(have) == 1
                  and (chunk_of[have[0]] if 0 <= have[0] < len(chunk_of) else None) == chunk)
        if not ok:
            want = (f"the sum of chunk {chunk} over ranks {sorted(coll.pre[chunk])}" if coll.combining
                    else f"chunk {chunk}")
            problems.append(f"rank {rank} output[{index}] should hold {want} but holds {state.describe(have)}")
            if len(problems) >= limit:
                break
    return problems


@st.composite
def states(draw) -> tuple[SymbolicState, int]:
    """A collective's state after arbitrary writes: right, wrong or missing contents, in any buffer, at indices
    inside and outside it (the general emit path does not bound them), in any order."""
    name = draw(st.sampled_from(["allgather", "allreduce", "reducescatter", "alltoall", "broadcast"]))
    n, chunks = draw(st.integers(2, 4)), draw(st.integers(1, 2))
    coll = make_collective(name, n, chunks, root=0 if name == "broadcast" else None, inplace=draw(st.booleans()))
    state = SymbolicState(coll)
    if draw(st.booleans()):  # start from the right answer, so that few slots are wrong
        for chunk, rank, index in coll.outputs:
            want: Content = (expected_content(coll, chunk) if coll.combining else
                             (next(r * coll.input_chunks + i for c, r, i in coll.inputs if c == chunk),))
            buf, idx = alias_slot(coll, rank, OUTPUT, index) if coll.inplace else (OUTPUT, index)
            state.slots[(rank, buf, idx)] = want
    contribution = st.integers(-1, n * coll.input_chunks)
    for _ in range(draw(st.integers(0, 12))):
        key = (draw(st.integers(0, n - 1)), draw(st.sampled_from(["input", "output", "scratch"])),
               draw(st.integers(-1, coll.output_chunks + 1)))
        if draw(st.integers(0, 4)) == 0:
            state.slots.pop(key, None)
        else:
            state.slots[key] = tuple(sorted(draw(st.lists(contribution, min_size=1, max_size=3))))
    return state, draw(st.integers(1, 25))


@given(states())
def test_postcondition_check_equals_a_lookup_per_output_slot(case):
    state, limit = case
    assert check_postcondition(state, limit) == _check_by_lookups(state, limit)
