from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives.spec import custom_collective, make_collective
from collsynth.core.errors import CollsynthError
from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.runtime import ExecutionResult, execute, samples
from collsynth.runtime.layout import ExecutionError
from collsynth.runtime.result import DEADLOCK, LAYOUT, LEFTOVER, MESSAGE_SIZE, MISMATCH, UNWRITTEN_READ


def steps(*specs) -> tuple[Step, ...]:
    """(type, srcbuf, srcoff, dstbuf, dstoff[, cnt, depid, deps, hasdep]) -> numbered Steps."""
    result = []
    for i, (kind, sb, so, db, do, *rest) in enumerate(specs):
        cnt, depid, deps, hasdep = list(rest) + [1, -1, -1, False][len(rest):]
        result.append(Step(i, kind, sb, so, db, do, cnt, depid, deps, hasdep))
    return tuple(result)


def chunks(flat: np.ndarray, count: int) -> np.ndarray:
    return flat.reshape(count, -1)


def set_step(ir: Algo, gpu: int, tb: int, step: int, **changes) -> Algo:
    gpus = list(ir.gpus)
    tbs = list(gpus[gpu].tbs)
    new_steps = list(tbs[tb].steps)
    new_steps[step] = replace(new_steps[step], **changes)
    tbs[tb] = replace(tbs[tb], steps=tuple(new_steps))
    gpus[gpu] = replace(gpus[gpu], tbs=tuple(tbs))
    return replace(ir, gpus=tuple(gpus))


def two_rank(tb0: tuple[Step, ...], tb1: tuple[Step, ...], coll: str = "allgather", i_chunks: int = 1,
             o_chunks: int = 2, s_chunks: int = 0) -> Algo:
    """A 2-rank IR with one threadblock per rank talking to the other rank."""
    gpus = (Gpu(0, i_chunks, o_chunks, s_chunks, (Threadblock(0, 1, 1, 0, tb0),)),
            Gpu(1, i_chunks, o_chunks, s_chunks, (Threadblock(0, 0, 0, 0, tb1),)))
    return Algo("two_rank", coll, "Simple", 1, max(i_chunks, o_chunks), 2, False, gpus)


# --- correct programs pass, and their outputs are the direct numpy result ------------------------------

@pytest.mark.parametrize("n", [2, 3, 5])
def test_ring_allgather_gathers_every_input(n):
    result = execute(samples.ring_allgather(n), nbytes=64)
    assert result.passed, result.message
    expected = np.concatenate([x for x in result.inputs])
    for out in result.outputs:
        np.testing.assert_array_equal(out, expected)
    assert result.collective == "AllGather" and result.failure is None and result.steps_run == n * (n + 1)


@pytest.mark.parametrize("ir", [samples.ring_allreduce(4), samples.ring_allreduce(3, fused=False),
                                samples.ring_allreduce(2, channels=3), samples.allreduce_via_scratch(4),
                                samples.allreduce_via_scratch(2)], ids=lambda ir: ir.name)
def test_allreduce_programs_sum_every_chunk(ir):
    result = execute(ir, nbytes=ir.nchunksperloop * 4 * 8, seed=3)
    assert result.passed, result.message
    total = np.sum(result.inputs, axis=0)
    for out in result.outputs:
        np.testing.assert_array_equal(out, total)


def test_allreduce_sample_uses_rrc_rrs_rrcs_re_cpy_nop():
    used = {s.type for ir in (samples.ring_allreduce(3), samples.ring_allreduce(3, fused=False),
                              samples.allreduce_via_scratch(3)) for _, tb in ir.threadblocks() for s in tb.steps}
    assert {"rrc", "rrs", "rrcs", "rcs", "re", "cpy", "nop", "s", "r"} <= used


def test_alltoall_transposes():
    n = 4
    result = execute(samples.pairwise_alltoall(n), nbytes=n * 4 * 3)
    assert result.passed, result.message
    for d in range(n):
        out = chunks(result.outputs[d], n)
        for s in range(n):
            np.testing.assert_array_equal(out[s], chunks(result.inputs[s], n)[d])


def test_inplace_allgather_uses_the_output_slice_as_input():
    n = 4
    result = execute(samples.ring_allgather(n, inplace=True), nbytes=64)
    assert result.passed, result.message
    expected = np.concatenate(result.inputs)
    for r, out in enumerate(result.outputs):
        np.testing.assert_array_equal(out, expected)
        np.testing.assert_array_equal(chunks(out, n)[r], result.inputs[r])


def test_inplace_allreduce_overwrites_the_input_buffer():
    ir = samples.ring_allreduce(3, inplace=True)
    assert all(gpu.o_chunks == 0 for gpu in ir.gpus)  # every step addresses "i", as MSCCL writes it
    result = execute(ir, nbytes=3 * 4 * 5)
    assert result.passed, result.message
    for out in result.outputs:
        np.testing.assert_array_equal(out, np.sum(result.inputs, axis=0))


def test_inplace_flag_matters():
    # The in-place ring AllGather only addresses "o"; run out of place, its input slot was never written.
    ir = replace(samples.ring_allgather(3, inplace=True), inplace=False)
    result = execute(ir, nbytes=12)
    assert not result.passed and result.failure == UNWRITTEN_READ


def test_multi_tile_loop_matches_vectorized_run():
    ir = samples.ring_allreduce(4, channels=2)
    nbytes = 8 * 4 * 1000  # 1000 float32 per chunk; tiles of 64 elements -> 16 tiles, the last one partial
    whole = execute(ir, nbytes=nbytes, seed=7)
    tiled = execute(ir, nbytes=nbytes, seed=7, tile_bytes=256, tile_by_tile=True)
    assert whole.passed and tiled.passed, (whole.message, tiled.message)
    assert tiled.tiles == 16 and tiled.chunk_elems == 1000
    assert tiled.steps_run == 16 * whole.steps_run
    for a, b in zip(whole.outputs, tiled.outputs, strict=True):
        np.testing.assert_array_equal(a, b)


def test_default_tiles_follow_the_protocol():
    ir = samples.ring_allgather(2)
    assert execute(ir, nbytes=4 << 20).tiles == 2  # Simple: 2 MiB slices of a 4 MiB chunk
    assert execute(replace(ir, proto="LL"), nbytes=64 << 10).tiles == 2  # LL: 32 KiB


@pytest.mark.parametrize("dtype", ["float16", "float64", "int32"])
def test_other_dtypes(dtype):
    result = execute(samples.ring_allreduce(4), nbytes=4 * 8 * np.dtype(dtype).itemsize, dtype=dtype)
    assert result.passed, result.message
    assert result.outputs[0].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(result.outputs[2], np.sum(result.inputs, axis=0, dtype=dtype))


def test_an_unsupported_dtype_is_refused_with_the_choices():
    with pytest.raises(ExecutionError, match="dtype 'int8' is not supported; use one of float32, float16, bfloat16"):
        execute(samples.ring_allreduce(2), dtype="int8")


def test_user_inputs_with_rounding_are_compared_with_tolerance():
    n = 8
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(n * 50).astype(np.float32) for _ in range(n)]
    result = execute(samples.ring_allreduce(n), inputs=inputs)
    assert result.passed, result.message
    assert result.nbytes == n * 50 * 4
    np.testing.assert_allclose(result.outputs[5], np.sum(inputs, axis=0), rtol=1e-5, atol=1e-5)
    with pytest.raises(ExecutionError, match="input of rank 0 has 3 elements"):
        execute(samples.ring_allreduce(2), inputs=[np.zeros(3), np.zeros(4)], nbytes=32)


def test_size_must_split_into_whole_elements_per_chunk():
    with pytest.raises(ExecutionError, match=r"does not split into 3 input chunks .* of 12 bytes \(e.g. 996\)"):
        execute(samples.ring_allreduce(3), nbytes=1000)


# --- what a wrong program does is reported, naming where ------------------------------------------------

def test_deadlock_names_every_stuck_threadblock():
    ir = two_rank(steps(("r", "i", 0, "o", 1), ("s", "i", 0, "o", 0)),
                  steps(("r", "i", 0, "o", 0), ("s", "i", 0, "o", 1)))
    result = execute(ir)
    assert not result.passed and result.failure == DEADLOCK
    assert result.details == (
        "gpu 0 tb 0 step 0 (r) waits for a message from rank 1 on channel 0; none ever arrives",
        "gpu 1 tb 0 step 0 (r) waits for a message from rank 0 on channel 0; none ever arrives")
    assert "2 threadblock(s) can never finish" in result.message


def test_dependency_cycle_is_a_deadlock():
    tbs = (Threadblock(0, -1, -1, 0, steps(("cpy", "i", 0, "o", 0, 1, 1, 0, True))),
           Threadblock(1, -1, -1, 0, steps(("cpy", "i", 0, "o", 0, 1, 0, 0, True))))
    ir = Algo("cycle", "broadcast", "Simple", 1, 1, 1, False, (Gpu(0, 1, 1, 0, tbs),))
    result = execute(ir)
    assert result.failure == DEADLOCK
    assert result.details[0] == ("gpu 0 tb 0 step 0 (cpy) waits for gpu 0 tb 1 to finish step 0 (it is stuck at step "
                                 "0, last published step -1)")


def test_bounded_connections_expose_programs_that_rely_on_buffering():
    ir = two_rank(steps(("s", "i", 0, "o", 0), ("s", "i", 0, "o", 1), ("r", "i", 0, "o", 1), ("r", "i", 0, "s", 0)),
                  steps(("s", "i", 0, "o", 1), ("s", "i", 0, "s", 0), ("r", "i", 0, "o", 0), ("r", "i", 0, "s", 0)),
                  s_chunks=1)
    assert execute(ir, postcondition=False).passed
    result = execute(ir, postcondition=False, fifo_capacity=1)
    assert result.failure == DEADLOCK
    assert "gpu 0 tb 0 step 1 (s) waits for room on the connection to rank 1 channel 0" in result.details[0]


def test_reading_unwritten_data_is_reported_with_the_step():
    # Rank 1 sends output[1] before anything wrote it (the copy from its input is missing).
    ir = samples.ring_allgather(2, inplace=True)
    ir = replace(ir, inplace=False)
    result = execute(ir)
    assert result.failure == UNWRITTEN_READ
    assert result.message.startswith("gpu 0 tb 0 step 0 (s) reads chunk 0 of its 1-chunk operand, which no step")


def test_reducing_into_unwritten_data_is_reported():
    tbs = (Threadblock(0, -1, -1, 0, steps(("re", "i", 0, "o", 0))),)
    ir = Algo("re_unwritten", "broadcast", "Simple", 1, 1, 1, False, (Gpu(0, 1, 1, 0, tbs),))
    result = execute(ir)
    assert result.failure == UNWRITTEN_READ and "gpu 0 tb 0 step 0 (re) adds into chunk 0" in result.message


def test_a_dropped_contribution_is_a_wrong_result():
    # Rank 1 forwards chunk 3's partial sum with rcs instead of adding its own contribution (rrs).
    ir = set_step(samples.ring_allreduce(4), 1, 0, 1, type="rcs", dstbuf="s", dstoff=0)
    ir = replace(ir, gpus=tuple(replace(g, s_chunks=1) for g in ir.gpus))
    result = execute(ir, nbytes=4 * 4 * 2)
    assert not result.passed and result.failure == MISMATCH
    assert result.message.startswith("4 of 16 output chunks are wrong; first: rank 0 output[3] should hold the sum "
                                     "of chunk 3 over ranks [0, 1, 2, 3]")
    assert len(result.details) == 4
    assert not np.array_equal(result.outputs[0], np.sum(result.inputs, axis=0))


def test_a_chunk_nobody_writes_is_named():
    ir = set_step(samples.ring_allgather(3), 0, 0, 3, dstoff=0)  # the last receive lands on output[0], not [1]
    result = execute(ir)
    assert result.failure == MISMATCH
    assert any(line == "rank 0 output[1] should hold chunk 1 (rank 1 input[0]) but no step wrote it"
               for line in result.details)


def test_message_size_mismatch():
    ir = two_rank(steps(("s", "i", 0, "o", 0, 2), ("r", "i", 0, "o", 0, 2)),
                  steps(("r", "i", 0, "o", 0, 1), ("s", "i", 0, "o", 0, 1)), coll="allreduce", i_chunks=2)
    result = execute(ir, postcondition=False)
    assert result.failure == MESSAGE_SIZE
    assert result.message == ("gpu 1 tb 0 step 0 (r) expects 1 chunk(s) but the oldest message on its connection has "
                              "2 (sent by gpu 0 tb 0 step 0 (s))")


def test_unreceived_messages_are_reported():
    ir = two_rank(steps(("s", "i", 0, "o", 0), ("s", "i", 0, "o", 1), ("r", "i", 0, "o", 1)),
                  steps(("s", "i", 0, "o", 1), ("r", "i", 0, "o", 0)))
    result = execute(ir, postcondition=False)
    assert result.failure == LEFTOVER
    assert result.details == ("rank 0 -> rank 1 channel 0: 1 message(s) never received, first sent by gpu 0 tb 0 "
                              "step 1 (s)",)


def test_layout_disagreements_are_failures():
    ir = replace(samples.ring_allgather(3), nchunksperloop=6)
    result = execute(ir)
    assert result.failure == LAYOUT and result.message.startswith("nchunksperloop=6 but the larger user buffer holds 3")
    # A collective with fewer output chunks than the IR addresses.
    small = custom_collective("firsttwo", 3, [(r, r, 0) for r in range(3)], [(0, 1, 0), (1, 0, 1)],
                              input_chunks=1, output_chunks=2)
    result = execute(replace(samples.ring_allgather(3), nchunksperloop=2), collective=small)
    assert result.failure == LAYOUT and "buffer holds 2 chunks for this collective" in result.message


# --- which collective, and the request itself --------------------------------------------------------------

def broadcast_chain(n: int, root: int) -> Algo:
    """Root sends its single chunk down the chain root -> root+1 -> ... (mod n)."""
    gpus = []
    for r in range(n):
        pos = (r - root) % n
        nxt, prv = (r + 1) % n, (r - 1) % n
        if pos == 0:
            tb = Threadblock(0, nxt, -1, 0, steps(("cpy", "i", 0, "o", 0), ("s", "i", 0, "o", 0)))
        elif pos == n - 1:
            tb = Threadblock(0, -1, prv, 0, steps(("r", "i", 0, "o", 0)))
        else:
            tb = Threadblock(0, nxt, prv, 0, steps(("rcs", "i", 0, "o", 0)))
        gpus.append(Gpu(r, 1, 1, 0, (tb,)))
    return Algo(f"bcast_chain_{root}", "broadcast", "Simple", 1, 1, n, False, tuple(gpus))


def test_root_of_a_rooted_collective_is_inferred():
    result = execute(broadcast_chain(4, 2))
    assert result.passed, result.message
    for out in result.outputs:
        np.testing.assert_array_equal(out, result.inputs[2])
    wrong = execute(broadcast_chain(4, 2), collective=make_collective("broadcast", 4, root=1))
    assert wrong.failure == MISMATCH


def test_a_coarser_collective_is_refined_to_the_irs_chunks():
    ir = samples.ring_allreduce(3, channels=2)  # 6 chunks; AllReduce(3 ranks, C=1) has 3
    assert execute(ir, collective=make_collective("allreduce", 3, 1)).passed
    with pytest.raises(ExecutionError, match="for 2 ranks but the IR has 3"):
        execute(ir, collective=make_collective("allreduce", 2, 1))


def test_custom_collectives_need_their_collective():
    ir = replace(samples.ring_allgather(2), collective="custom")
    with pytest.raises(ExecutionError, match="pass its Collective"):
        execute(ir)
    assert execute(ir, postcondition=False).passed
    coll = make_collective("allgather", 2)
    assert execute(ir, collective=coll).passed


def test_unknown_backend_and_bad_capacity():
    with pytest.raises(ExecutionError, match="unknown backend 'tpu'"):
        execute(samples.ring_allgather(2), backend="tpu")
    with pytest.raises(ExecutionError, match="fifo_capacity=0"):
        execute(samples.ring_allgather(2), fifo_capacity=0)
    assert issubclass(ExecutionError, CollsynthError)


def test_verdict_line():
    result = execute(samples.ring_allreduce(4), nbytes=1 << 20)
    assert isinstance(result, ExecutionResult)
    line = result.verdict()
    assert line.startswith("PASS  AllReduce  ngpus=4  size=1MB  dtype=float32  time=") and line.endswith("backend=cpu")
    failed = execute(two_rank(steps(("r", "i", 0, "o", 1)), steps(("r", "i", 0, "o", 0))))
    assert failed.verdict().startswith("FAIL  AllGather  ngpus=2")
    assert "deadlock: 2 threadblock(s)" in failed.verdict()
    assert str(failed).splitlines()[1].startswith("  gpu 0 tb 0 step 0 (r)")


# --- property: random relocation programs compute what numpy computes ----------------------------------------

@st.composite
def relocation_programs(draw):
    """Random chains moving input chunks to output slots through 0-2 intermediate ranks (scratch), over two
    channels, optionally adding one of the destination's inputs at the end. Messages on a connection are
    ordered by (hop level, chain), which makes every such program deadlock-free."""
    n = draw(st.integers(2, 4))
    k_in = draw(st.integers(1, 3))
    k_out = draw(st.integers(1, 3))
    chains = []
    for d in range(n):
        for j in range(k_out):
            src = (draw(st.integers(0, n - 1)), draw(st.integers(0, k_in - 1)))
            hops = draw(st.lists(st.integers(0, n - 1), max_size=2))
            path = [src[0]]
            for rank in [*hops, d]:
                if rank != path[-1]:
                    path.append(rank)
            add = draw(st.none() | st.integers(0, k_in - 1))
            chans = [draw(st.integers(0, 1)) for _ in range(len(path) - 1)]
            chains.append((src, path, chans, (d, j), add))
    return n, k_in, k_out, chains


def build_relocation_ir(n, k_in, k_out, chains):
    send_ops = {}  # (rank, peer, chan) -> [(key, step spec fn)]
    recv_ops = {}
    local_ops = {r: [] for r in range(n)}
    scratch = [0] * n
    for cid, (src, path, chans, (d, j), add) in enumerate(chains):
        if len(path) == 1:
            local_ops[d].append(("cpy", "i", src[1], "o", j))
            if add is not None:
                local_ops[d].append(("re", "i", add, "o", j))
            continue
        where = ("i", src[1])  # where the data sits on the current rank
        for level, (a, b) in enumerate(zip(path, path[1:], strict=False)):
            chan = chans[level]
            last = level == len(path) - 2
            if last:
                recv = ("rrc", "i", add, "o", j) if add is not None else ("r", "i", 0, "o", j)
            else:
                recv = ("r", "i", 0, "s", scratch[b])
            send_ops.setdefault((a, b, chan), []).append(((level, cid), ("s", *where, "o", 0), level > 0))
            recv_ops.setdefault((b, a, chan), []).append(((level, cid), recv))
            if not last:
                where = ("s", scratch[b])
                scratch[b] += 1
    gpus = []
    for r in range(n):
        tbs = []
        recv_step_of = {}  # (level, cid) -> (tb id, step) of the receive on this rank
        for (rank, peer, chan), ops in sorted(recv_ops.items()):
            if rank != r:
                continue
            ops.sort(key=lambda op: op[0])
            tb_id = len(tbs)
            for index, (key, _) in enumerate(ops):
                recv_step_of[key] = (tb_id, index)
            tbs.append([tb_id, -1, peer, chan, [spec for _, spec in ops]])
        waited = set()
        for (rank, peer, chan), ops in sorted(send_ops.items()):
            if rank != r:
                continue
            ops.sort(key=lambda op: op[0])
            specs = []
            for (level, cid), spec, forwarded in ops:
                if forwarded:  # wait for the receive of the previous hop on this rank
                    dep = recv_step_of[(level - 1, cid)]
                    waited.add(dep)
                    specs.append((*spec, 1, *dep, False))
                else:
                    specs.append(spec)
            tbs.append([len(tbs), peer, -1, chan, specs])
        for tb in tbs:  # mark waited receives
            tb[4] = [(*spec[:5], 1, -1, -1, (tb[0], i) in waited) if len(spec) == 5 else spec
                     for i, spec in enumerate(tb[4])]
        if local_ops[r]:
            tbs.append([len(tbs), -1, -1, 0, local_ops[r]])
        gpus.append(Gpu(r, k_in, k_out, scratch[r],
                        tuple(Threadblock(t, s, rv, c, steps(*specs)) for t, s, rv, c, specs in tbs)))
    return Algo("relocation", "custom", "Simple", 2, max(k_in, k_out), n, False, tuple(gpus))


@given(relocation_programs(), st.sampled_from(["float32", "int32"]), st.integers(0, 3))
def test_random_relocation_programs_compute_what_numpy_computes(program, dtype, seed):
    n, k_in, k_out, chains = program
    ir = build_relocation_ir(n, k_in, k_out, chains)
    elems = 6
    result = execute(ir, nbytes=k_in * elems * np.dtype(dtype).itemsize, dtype=dtype, seed=seed, postcondition=False)
    assert result.passed, result.message
    inputs = [x.reshape(k_in, elems) for x in result.inputs]
    for src, _, _, (d, j), add in chains:
        expected = inputs[src[0]][src[1]] + (inputs[d][add] if add is not None else 0)
        np.testing.assert_array_equal(result.outputs[d].reshape(k_out, elems)[j], expected)
    # Tile by tile (3 tiles of 2 elements) gives the same buffers.
    tiled = execute(ir, nbytes=k_in * elems * np.dtype(dtype).itemsize, dtype=dtype, seed=seed, postcondition=False,
                    tile_bytes=2 * np.dtype(dtype).itemsize, tile_by_tile=True)
    assert tiled.tiles == 3
    for a, b in zip(result.outputs, tiled.outputs, strict=True):
        np.testing.assert_array_equal(a, b)
    # Without reductions the program is a collective: the postcondition check agrees.
    if all(add is None for *_, add in chains):
        coll = custom_collective("relocation", n, [(r * k_in + i, r, i) for r in range(n) for i in range(k_in)],
                                 [(s * k_in + i, d, j) for (s, i), _, _, (d, j), _ in chains],
                                 input_chunks=k_in, output_chunks=k_out)
        assert execute(ir, nbytes=k_in * elems * 4, seed=seed, collective=coll).passed
