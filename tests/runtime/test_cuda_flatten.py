"""The CUDA backend's flattening of IR into kernel tables (pure numpy; no GPU needed)."""

import re
from dataclasses import replace

import numpy as np
import pytest

from collsynth.ir import Gpu, Step, Threadblock
from collsynth.runtime.cuda import flatten as fl
from collsynth.runtime.cuda.build import kernel_source
from collsynth.runtime.cuda.numerics import DTYPES, OPS
from collsynth.runtime.cuda.workloads import allpairs_allreduce, alltoall, ring_allgather, ring_allreduce
from collsynth.runtime.layout import collective_for, plan_layout
from collsynth.runtime.result import DEADLOCK, LEFTOVER, MESSAGE_SIZE


def layout_of(ir, chunk_elems, itemsize=4, tile_bytes=None):
    coll = collective_for(ir)
    dtype = {4: np.dtype(np.float32), 2: np.dtype(np.float16)}[itemsize]
    return plan_layout(ir, coll, coll.input_chunks * chunk_elems * itemsize, dtype, tile_bytes)


def flat_of(ir, chunk_elems=64, itemsize=4, **kw):
    return fl.flatten(ir, layout_of(ir, chunk_elems, itemsize), itemsize, **kw)


def step_row(flat, rank, tb, s):
    b = next(i for i in range(flat.nblocks)
             if flat.blocks[i, fl.BLOCK_RANK] == rank and flat.blocks[i, fl.BLOCK_TB] == tb)
    return b, flat.steps[flat.blocks[b, fl.BLOCK_FIRST_STEP] + s]


# --- connections, blocks and slots ---------------------------------------------------------------------

def test_connections_are_sorted_and_each_block_knows_its_ends():
    flat = flat_of(ring_allgather(4, 2))
    assert flat.nblocks == 8
    keys = [tuple(int(v) for v in row[:3]) for row in flat.conns]
    assert keys == sorted(keys) == sorted((r, (r + 1) % 4, c) for r in range(4) for c in range(2))
    for b in range(flat.nblocks):
        rank, tb = int(flat.blocks[b, fl.BLOCK_RANK]), int(flat.blocks[b, fl.BLOCK_TB])
        assert b == rank * 2 + tb  # blocks numbered gpu by gpu, tb by tb
        send, recv = flat.conns[flat.blocks[b, fl.BLOCK_SEND_CONN]], flat.conns[flat.blocks[b, fl.BLOCK_RECV_CONN]]
        assert tuple(send[:3]) == (rank, (rank + 1) % 4, tb)
        assert tuple(recv[:3]) == ((rank - 1) % 4, rank, tb)
        assert send[fl.CONN_SEND_BLOCK] == b and recv[fl.CONN_RECV_BLOCK] == b


def test_slot_layout_is_disjoint_and_sized_for_the_largest_message():
    flat = flat_of(ring_allreduce(3), chunk_elems=40, nslots=4)
    assert flat.slot_elems == flat.piece_elems  # every message has cnt 1
    bases = flat.conns[:, fl.CONN_SLOT_BASE]
    assert list(bases) == [c * 4 * flat.slot_elems for c in range(flat.nconns)]
    assert flat.fifo_elems == flat.nconns * 4 * flat.slot_elems


def alltoall_cnt2(n=3):
    """AllToAll with chunk factor 2 whose peer threadblocks move both chunks of a peer in one message."""
    gpus = []
    for r in range(n):
        peers = [q for q in range(n) if q != r]
        tbs = [Threadblock(i, p, p, 0, (Step(0, "s", "i", p * 2, "o", r * 2, 2),
                                        Step(1, "r", "i", p * 2, "o", p * 2, 2))) for i, p in enumerate(peers)]
        tbs.append(Threadblock(len(tbs), -1, -1, 0, (Step(0, "cpy", "i", r * 2, "o", r * 2, 2),)))
        gpus.append(Gpu(r, 2 * n, 2 * n, 0, tuple(tbs)))
    return replace(alltoall(n), gpus=tuple(gpus), nchunksperloop=2 * n, name=f"alltoall_cnt2_{n}")


def test_message_of_several_chunks_sizes_the_slots():
    flat = flat_of(alltoall_cnt2(), chunk_elems=8)
    assert flat.slot_elems == 2 * flat.piece_elems
    assert set(flat.steps[:, fl.STEP_CNT]) == {2}


def test_duplicate_connection_end_is_refused():
    ir = ring_allgather(2)
    tb0 = ir.gpus[0].tbs[0]
    gpus = (replace(ir.gpus[0], tbs=(tb0, replace(tb0, id=1))), ir.gpus[1])
    with pytest.raises(fl.CudaBackendError, match="both send to rank 1 on channel 0"):
        flat_of(replace(ir, gpus=gpus))


@pytest.mark.parametrize("change, kind", [("drop_recv", LEFTOVER), ("drop_send", DEADLOCK), ("cnt", MESSAGE_SIZE)])
def test_unpaired_messages_are_refused_with_the_cpu_failure_kind(change, kind):
    ir = alltoall(2)
    gpu1 = ir.gpus[1]
    peer = gpu1.tbs[0]
    steps = list(peer.steps)
    if change == "drop_recv":
        steps = [steps[0]]
    elif change == "drop_send":
        steps = [replace(steps[1], s=0)]
    else:
        steps[1] = replace(steps[1], cnt=2, dstoff=0)
    gpus = (ir.gpus[0], replace(gpu1, tbs=(replace(peer, steps=tuple(steps)),) + gpu1.tbs[1:]))
    with pytest.raises(fl.MessageMismatchError) as info:
        flat_of(replace(ir, gpus=gpus))
    assert info.value.kind == kind
    assert "connection rank" in str(info.value)


def test_out_of_range_operand_and_partial_overlap_are_refused():
    ir = ring_allgather(2)
    bad = replace(ir.gpus[0].tbs[0].steps[0], dstoff=2, cnt=1)  # output has 2 chunks: index 2 is outside
    gpus = (replace(ir.gpus[0], tbs=(replace(ir.gpus[0].tbs[0], steps=(bad,) + ir.gpus[0].tbs[0].steps[1:]),)),
            ir.gpus[1])
    with pytest.raises(fl.OutOfBoundsError, match="buffer 'o', which has 2 chunks"):
        flat_of(replace(ir, gpus=gpus))
    copy = Threadblock(0, -1, -1, 0, (Step(0, "cpy", "o", 0, "o", 1, 2),))
    odd = replace(ir, gpus=(Gpu(0, 1, 3, 0, (copy,)), Gpu(1, 1, 3, 0, ())), ngpus=2)
    layout = replace(layout_of(ir, 16), output_chunks=3)
    with pytest.raises(fl.CudaBackendError, match="overlap partially"):
        fl.flatten(odd, layout, 4)


# --- operands, dependencies, tiles ----------------------------------------------------------------------

def test_chunk_offsets_in_the_data_arena():
    E = 64
    flat = flat_of(ring_allgather(4, 2), chunk_elems=E)
    # Rank r: input (2 chunks) then output (8 chunks); no scratch; 16-byte aligned starts.
    per_rank = 2 * E + 8 * E
    assert list(flat.buffer_base[:, 0]) == [r * per_rank for r in range(4)]
    assert list(flat.buffer_base[:, 1]) == [r * per_rank + 2 * E for r in range(4)]
    _, row = step_row(flat, 1, 1, 0)  # cpy i[1] -> o[1*2+1]
    assert row[fl.STEP_TYPE] == fl.STEP_CODES["cpy"]
    assert row[fl.STEP_SRC] == per_rank + 1 * E
    assert row[fl.STEP_DST] == per_rank + 2 * E + 3 * E
    _, send = step_row(flat, 1, 1, 1)
    assert send[fl.STEP_DST] == -1  # a send has no local destination
    assert flat.data_elems == 4 * per_rank


def test_odd_sizes_keep_buffers_16_byte_aligned():
    flat = flat_of(ring_allgather(3), chunk_elems=5)
    assert all(int(b) % 4 == 0 for b in flat.buffer_base.reshape(-1))
    assert not flat.vectorize


def test_inplace_buffers_alias_as_nccl_defines():
    E = 32
    ag = replace(ring_allgather(4, 2), inplace=True)
    flat = flat_of(ag, chunk_elems=E)
    for r in range(4):
        assert flat.buffer_base[r, 0] == flat.buffer_base[r, 1] + r * 2 * E  # input = output slice r
    ar = replace(ring_allreduce(4), inplace=True)
    flat = flat_of(ar, chunk_elems=E)
    assert list(flat.buffer_base[:, 0]) == list(flat.buffer_base[:, 1])
    assert flat.data_elems == 4 * 4 * E


def test_dependencies_point_at_global_blocks_and_publish_only_hasdep_steps():
    n = 4
    flat = flat_of(allpairs_allreduce(n), chunk_elems=16)
    for rank in range(n):
        reducer = n - 1  # tb ids 0..n-2 are the peer threadblocks, n-1 reduces
        red_block, _ = step_row(flat, rank, reducer, 0)
        for peer_tb in range(n - 1):
            b, wait = step_row(flat, rank, peer_tb, 2)
            assert wait[fl.STEP_DEP_BLOCK] == red_block
            assert wait[fl.STEP_DEP_STEP] == n - 1 and wait[fl.STEP_DEP_NSTEPS] == n
            _, recv = step_row(flat, rank, peer_tb, 1)
            assert recv[fl.STEP_PUBLISH] == 1
            _, reduce = step_row(flat, rank, reducer, 1 + peer_tb)
            assert reduce[fl.STEP_DEP_BLOCK] == b and reduce[fl.STEP_DEP_STEP] == 1
        publishes = [int(step_row(flat, rank, reducer, s)[1][fl.STEP_PUBLISH]) for s in range(n)]
        assert publishes == [0] * (n - 1) + [1]


def test_a_nop_never_publishes():
    ir = ring_allgather(2)
    tb = ir.gpus[0].tbs[0]
    steps = tb.steps + (Step(len(tb.steps), "nop", "i", 0, "i", 0, 0, -1, -1, True),)
    gpus = (replace(ir.gpus[0], tbs=(replace(tb, steps=steps),)), ir.gpus[1])
    flat = flat_of(replace(ir, gpus=gpus))
    assert flat.steps[len(tb.steps), fl.STEP_TYPE] == fl.STEP_CODES["nop"]
    assert flat.steps[len(tb.steps), fl.STEP_PUBLISH] == 0


def test_tile_math():
    ir = ring_allreduce(2)
    layout = layout_of(ir, 1000)
    flat = fl.flatten(ir, layout, 4, slot_bytes=1024)
    assert flat.piece_elems == 256 and flat.ntiles == 4
    assert [flat.tile_len(t) for t in range(4)] == [256, 256, 256, 232]
    assert flat.vectorize  # 1000 floats = 4000 bytes per chunk, pieces of 1 KiB
    big = fl.flatten(ir, layout, 4)
    assert big.ntiles == 1 and big.piece_elems == 1000
    # The layout's tile bounds the piece as well (as the CPU interpreter's tiles do).
    small_tiles = fl.flatten(ir, layout_of(ir, 1000, tile_bytes=400), 4)
    assert small_tiles.piece_elems == 100 and small_tiles.ntiles == 10


@pytest.mark.parametrize("chunk_elems, itemsize, slot_bytes, expect", [
    (1000, 4, 1 << 20, True), (1001, 4, 1 << 20, False), (1001, 4, 256, False), (8, 2, 1 << 20, True),
    (12, 2, 1 << 20, False), (4096, 2, 1000, True)])
def test_vectorization_needs_16_byte_chunks_and_pieces(chunk_elems, itemsize, slot_bytes, expect):
    ir = ring_allgather(2)
    flat = fl.flatten(ir, layout_of(ir, chunk_elems, itemsize), itemsize, slot_bytes=slot_bytes)
    assert flat.vectorize is expect
    if flat.ntiles > 1:
        assert flat.piece_elems * itemsize % 16 == 0


def test_piece_shrinks_to_keep_all_fifos_under_the_limit():
    assert fl.choose_piece(10_000, 10_000, 4, 1, 10, 8, 1 << 20, 1 << 30) == 10_000
    piece = fl.choose_piece(1 << 20, 1 << 20, 4, 2, 100, 8, 256 << 10, 4 << 20)
    assert piece * 4 * 2 * 100 * 8 <= 4 << 20 and piece % 4 == 0
    assert fl.choose_piece(1 << 20, 1 << 20, 4, 71, 10_000, 8, 1 << 10, 1 << 10) == 4  # never below 16 bytes


def test_residency_check():
    fl.check_residency(132, 132, 1)
    fl.check_residency(200, 100, 2)
    with pytest.raises(fl.ResidencyError, match=r"needs 133 resident threadblocks .* at most 132 \(132 SMs x 1"):
        fl.check_residency(133, 132, 1, name="big")


def test_traffic_bytes_counts_reads_and_writes_per_step_type():
    n, E = 4, 64
    flat = flat_of(ring_allgather(n), chunk_elems=E)
    moved, traffic = fl.traffic_bytes(flat)
    chunk = E * 4
    assert moved == n * (n - 1) * chunk  # s, then n-2 rcs: n-1 sends per rank
    assert traffic == n * chunk * (2 + 2 + 3 * (n - 2) + 2)  # cpy, s, rcs..., r


def test_output_written_mask():
    flat = flat_of(ring_allreduce(4), chunk_elems=8)
    assert all(mask.all() for mask in fl.output_written_mask(flat))
    flat = flat_of(ring_allgather(2), chunk_elems=8)
    assert all(mask.tolist() == [True, True] for mask in fl.output_written_mask(flat))


def test_str_and_wait_descriptions_are_readable():
    flat = flat_of(allpairs_allreduce(2), chunk_elems=8)
    text = str(flat)
    assert "block 0 = rank 0 tb 0" in text and "after block 1.s1" in text and "publish" in text
    assert flat.describe_wait(0, 0, 3, fl.WAIT_RECV).endswith("waiting to receive from rank 1 on channel 0")
    assert "waiting for a free slot to send to rank 1" in flat.describe_wait(0, 0, 0, fl.WAIT_SEND)
    assert flat.describe_wait(0, 1, 2, fl.WAIT_DEP) == ("rank 0 tb 0 step 2 (tile 1 of 1): "
                                                        "waiting for rank 0 tb 1 step 1")


# --- the kernel agrees with the Python side -----------------------------------------------------------

def test_kernel_constants_match_the_flat_layout():
    defines = {name: int(value) for name, value in re.findall(r"#define CS_(\w+) (-?\d+)\b", kernel_source())}
    expected = {"STEP_COLS": fl.STEP_COLS, "BLOCK_COLS": fl.BLOCK_COLS, "CONN_COLS": fl.CONN_COLS,
                "STATUS_COLS": fl.STATUS_COLS, "CONN_SLOT_BASE": fl.CONN_SLOT_BASE,
                "STATE_DONE": fl.STATE_DONE, "STATE_STUCK": fl.STATE_STUCK, "WAIT_DEP": fl.WAIT_DEP,
                "WAIT_RECV": fl.WAIT_RECV, "WAIT_SEND": fl.WAIT_SEND}
    for name in ("TYPE", "CNT", "SRC", "DST", "DEP_BLOCK", "DEP_STEP", "DEP_NSTEPS", "PUBLISH"):
        expected[f"STEP_{name}"] = getattr(fl, f"STEP_{name}")
    for name in ("RANK", "TB", "FIRST_STEP", "NSTEPS", "SEND_CONN", "RECV_CONN"):
        expected[f"BLOCK_{name}"] = getattr(fl, f"BLOCK_{name}")
    kernel_types = {"s": "SEND", "r": "RECV", "rcs": "RCS", "rrs": "RRS", "rrc": "RRC", "rrcs": "RRCS", "cpy": "CPY",
                    "re": "RE", "nop": "NOP"}
    for ir_type, code in fl.STEP_CODES.items():
        expected[kernel_types[ir_type]] = code
    for dt in DTYPES.values():
        expected[f"DT_{dt.suffix.upper()}"] = dt.code
    for op, code in OPS.items():
        expected[f"OP_{op.upper()}"] = code
    for name, value in expected.items():
        assert defines.get(name) == value, name
