"""Property: random small DSL programs, compiled with and without fusion and with 1-4 instances, leave
the same output buffers in the CPU interpreter as executing the DSL directly (symbolically, then
evaluated on the same inputs), and the IR has no data race."""

import numpy as np
from compiler_helpers import races
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.compiler import compile_program, instance_collective
from collsynth.language import ProgramBuilder, ProgramError
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.runtime import execute
from collsynth.topologies import fully_connected

ELEMS = 2  # elements per chunk
SCRATCH = 3  # chunks of the scratch buffer "tmp" per rank
CHANNEL_HINTS = st.sampled_from([None, None, None, 0, 1])

COLLECTIVES = {
    "allreduce": lambda n, c: make_collective("allreduce", n, c),
    "allgather": lambda n, c: make_collective("allgather", n, c),
    "allgather-inplace": lambda n, c: make_collective("allgather", n, c, inplace=True),
    "alltoall": lambda n, c: make_collective("alltoall", n, c),
}


@st.composite
def random_programs(draw):
    n = draw(st.integers(2, 4))
    kind = draw(st.sampled_from(sorted(COLLECTIVES)))
    coll = COLLECTIVES[kind](n, draw(st.integers(1, 2)))
    instances = draw(st.integers(1, 4))
    # Interleaved, multi-chunk transfers are replicated as blocks that overlap other instances' parts of
    # the same chunks: the compiler must order those overlaps (and keep scratch in the same layout).
    multi = draw(st.booleans())
    interleaved = coll.inplace or draw(st.booleans())  # batched layout cannot alias in-place buffers
    b = ProgramBuilder("random", fully_connected(n), coll)
    sizes = {INPUT: coll.input_chunks, OUTPUT: coll.output_chunks, "tmp": SCRATCH}
    last = None  # the slot the previous op wrote: forwarding it again makes fusable chains
    for _ in range(draw(st.integers(3, 16))):
        written = sorted(b.state.slots)
        if last is not None and draw(st.booleans()):
            rank, buf, index, count = last
        else:
            rank, buf, index = draw(st.sampled_from(written))
            count = 2 if multi and (rank, buf, index + 1) in b.state.slots and draw(st.booleans()) else 1
        src = b.chunk(rank, buf, index, count)
        try:
            if draw(st.booleans()):
                peer = draw(st.integers(0, n - 1))
                dst_buf = draw(st.sampled_from([OUTPUT, OUTPUT, INPUT, "tmp"]))
                if sizes[dst_buf] < count:
                    continue
                dst = src.copy(peer, dst_buf, draw(st.integers(0, sizes[dst_buf] - count)), ch=draw(CHANNEL_HINTS))
            else:
                targets = [k for k in written if (k[0], k[1], k[2] + count - 1) in b.state.slots]
                peer, dst_buf, dst_index = draw(st.sampled_from(targets))
                dst = b.chunk(peer, dst_buf, dst_index, count).reduce(src, ch=draw(CHANNEL_HINTS))
            last = (dst.rank, dst.slot.buffer, dst.index, dst.size)
        except ProgramError:
            continue  # e.g. overlapping source and destination: the DSL refuses, try another op
    program = b.build()
    return program, instances, interleaved, draw(st.integers(0, 2**16))


def expected_outputs(program, instances, interleaved, inputs):
    """Direct execution: per rank (values, written) of the IR-granularity output buffer."""
    coll = program.collective
    state = b_state(program)
    width = coll.input_chunks

    def position(index, part, size):
        return index * instances + part if interleaved else size * part + index

    result = []
    for rank in range(coll.num_ranks):
        values = np.zeros((coll.output_chunks * instances, ELEMS), dtype=np.float32)
        written = np.zeros(coll.output_chunks * instances, dtype=bool)
        for j in range(coll.output_chunks):
            content = state.content(rank, OUTPUT, j)
            if content is None:
                continue
            for part in range(instances):
                p = position(j, part, coll.output_chunks)
                values[p] = sum(inputs[c // width][position(c % width, part, width)] for c in content)
                written[p] = True
        result.append((values, written))
    return result


def b_state(program):
    from collsynth.language import run_symbolic

    return run_symbolic(program)


@given(random_programs())
def test_compiled_programs_match_direct_execution(case):
    program, instances, interleaved, seed = case
    coll = program.collective
    rng = np.random.default_rng(seed)
    inputs = [rng.integers(-50, 50, size=(coll.input_chunks * instances, ELEMS)).astype(np.float32)
              for _ in range(coll.num_ranks)]
    expected = expected_outputs(program, instances, interleaved, inputs)
    for fusion in (True, False):
        ir = compile_program(program, instr_fusion=fusion, instances=instances, interleaved_replication=interleaved)
        result = execute(ir, backend="cpu", inputs=inputs, collective=instance_collective(coll, instances),
                         postcondition=False)
        assert result.passed, f"fusion={fusion}: {result.message}\n{program}\n{ir}"
        assert races(ir) == [], f"fusion={fusion}, instances={instances}\n{program}\n{ir}"
        for rank, (values, written) in enumerate(expected):
            got = result.outputs[rank].reshape(-1, ELEMS)
            np.testing.assert_array_equal(got[written], values[written],
                                          err_msg=f"rank {rank}, fusion={fusion}, instances={instances}\n{program}")
