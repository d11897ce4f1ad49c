"""The numpy model of the CUDA kernel against the CPU reference interpreter (no GPU needed).

The emulator executes the flattened tables exactly as the kernel does (tiles, bounded FIFO slots,
head/tail and progress counters, the same reduction arithmetic), so these tests check the flattening
and the kernel's protocol on every machine; the GPU tests then compare the kernel with the same
references bit for bit.
"""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.ir import Gpu, Step, Threadblock
from collsynth.runtime import execute
from collsynth.runtime.cuda import CudaUnavailableError, DeadlockError, execute_cuda, prepare
from collsynth.runtime.cuda.emulate import emulate
from collsynth.runtime.cuda.flatten import flatten
from collsynth.runtime.cuda.numerics import (
    bf16_to_float32,
    element_type,
    float32_to_bf16,
    random_inputs,
    reducer,
)
from collsynth.runtime.cuda.workloads import WORKLOADS, alltoall, ring_allreduce
from collsynth.runtime.layout import collective_for, plan_layout
from collsynth.runtime.result import DEADLOCK

CPU_DTYPES = ("float32", "float16", "int32")


def cpu_and_emulator(ir, chunk_elems, dtype, seed=0, nslots=8, slot_bytes=256 << 10):
    """Outputs of both on the same truly random inputs (sums not exact: the reduction order shows)."""
    coll = collective_for(ir)
    etype = element_type(dtype)
    inputs = random_inputs(etype, [(coll.input_chunks, chunk_elems)] * ir.ngpus, seed)
    prep = prepare(ir, dtype=dtype, inputs=inputs, reference="emulator", nslots=nslots, slot_bytes=slot_bytes)
    cpu = execute(ir, dtype=dtype, inputs=inputs, fifo_capacity=nslots)
    return prep, cpu


def assert_same_bits(emulated, cpu_outputs, dtype):
    bits = np.dtype(f"u{element_type(dtype).itemsize}")
    for rank, (a, b) in enumerate(zip(emulated, cpu_outputs, strict=True)):
        a, b = np.asarray(a).reshape(-1), np.asarray(b).reshape(-1)
        assert a.shape == b.shape
        diff = np.flatnonzero(a.view(bits) != b.view(bits))
        assert diff.size == 0, f"rank {rank} differs at element {diff[:1]}: {a[diff[:1]]} vs {b[diff[:1]]}"


@pytest.mark.parametrize("dtype", CPU_DTYPES)
@pytest.mark.parametrize("n, instances", [(2, 1), (3, 2), (8, 1)])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_emulator_is_bit_identical_to_the_cpu_interpreter(workload, n, instances, dtype):
    ir = WORKLOADS[workload](n, instances)
    # 100 elements per chunk in pieces of 16 floats: 7 tiles, the last one short, pipelined through 2 slots.
    prep, cpu = cpu_and_emulator(ir, 100, dtype, seed=n, nslots=2, slot_bytes=64)
    assert cpu.passed, cpu.message
    assert prep.flat.ntiles > 1
    assert prep.reference_passed, prep.reference_message
    assert_same_bits(prep.reference, cpu.outputs, dtype)


def test_the_comparison_can_see_the_reduction_order():
    """Random float32 sums over 8 ranks depend on the order: the ring's order is not the rank order, and the
    emulator matches the CPU interpreter's (received + local, step by step) bit for bit."""
    ir = ring_allreduce(8)
    prep, cpu = cpu_and_emulator(ir, 256, "float32", seed=3)
    assert_same_bits(prep.reference, cpu.outputs, "float32")
    inputs = [x.reshape(8, 256) for x in prep.inputs]
    rank_order = inputs[0].copy()
    for x in inputs[1:]:
        rank_order = rank_order + x
    assert np.any(rank_order.reshape(-1) != np.asarray(cpu.outputs[0]))


def test_one_slot_and_many_tiles_still_match():
    ir = WORKLOADS["allreduce_allpairs"](4, 2)
    prep, cpu = cpu_and_emulator(ir, 77, "float32", nslots=1, slot_bytes=16)
    assert prep.flat.ntiles == 20 and prep.flat.piece_elems == 4
    assert_same_bits(prep.reference, cpu.outputs, "float32")


def receive_first_ir():
    """Both ranks receive before they send: a deadlock on any backend."""
    ir = alltoall(2)
    gpus = []
    for gpu in ir.gpus:
        peer = gpu.tbs[0]
        send, recv = peer.steps
        swapped = replace(peer, steps=(replace(recv, s=0), replace(send, s=1)))
        gpus.append(replace(gpu, tbs=(swapped,) + gpu.tbs[1:]))
    return replace(ir, gpus=tuple(gpus), name="receive_first")


def test_deadlock_names_the_stuck_threadblocks():
    ir = receive_first_ir()
    coll = collective_for(ir)
    layout = plan_layout(ir, coll, coll.input_chunks * 16 * 4, np.dtype(np.float32))
    flat = flatten(ir, layout, 4)
    with pytest.raises(DeadlockError) as info:
        emulate(flat, np.zeros(flat.data_elems, dtype=np.float32), element_type("float32"))
    message = str(info.value)
    assert "deadlock in 'receive_first'" in message and "2 of 4 threadblocks unfinished" in message
    assert "rank 0 tb 0 step 0 (tile 0 of 1): waiting to receive from rank 1 on channel 0" in message
    assert "rank 1 tb 0 step 0 (tile 0 of 1): waiting to receive from rank 0 on channel 0" in message
    assert len(info.value.details) == 2


@pytest.mark.parametrize("reference", ["cpu", "emulator"])
def test_a_broken_program_fails_without_a_gpu(reference):
    prep = prepare(receive_first_ir(), nbytes=256, reference=reference)
    assert not prep.runnable and prep.reference_failure == DEADLOCK
    result = execute_cuda(receive_first_ir(), nbytes=256)  # the CPU reference finds it: CuPy is not needed
    assert not result.passed and result.failure == DEADLOCK and result.backend == "cuda"
    assert "found by the cpu reference" in result.message


def sends_then_receives_ir(k=3):
    """2-rank AllToAll with chunk factor k: each rank sends all k chunks before receiving any, so it needs k
    messages of buffering per connection."""
    gpus = []
    for r in range(2):
        p = 1 - r
        steps = [Step(i, "s", "i", p * k + i, "o", r * k + i, 1) for i in range(k)]
        steps += [Step(k + i, "r", "i", p * k + i, "o", p * k + i, 1) for i in range(k)]
        local = Threadblock(1, -1, -1, 0, (Step(0, "cpy", "i", r * k, "o", r * k, k),))
        tbs = (Threadblock(0, p, p, 0, tuple(steps)), local)
        gpus.append(Gpu(r, 2 * k, 2 * k, 0, tbs))
    return replace(alltoall(2), gpus=tuple(gpus), nchunksperloop=2 * k, name="sends_then_receives")


def test_bounded_slots_deadlock_exactly_where_the_cpu_fifo_capacity_does():
    ir = sends_then_receives_ir(3)
    for nslots, expect_deadlock in ((2, True), (3, False)):
        cpu = execute(ir, nbytes=6 * 64 * 4, fifo_capacity=nslots)
        prep = prepare(ir, nbytes=6 * 64 * 4, reference="emulator", nslots=nslots)
        assert (cpu.failure == DEADLOCK) is expect_deadlock
        assert (prep.reference_failure == DEADLOCK) is expect_deadlock
        if expect_deadlock:
            assert "waiting for a free slot to send to rank 1 on channel 0" in prep.reference_message
        else:
            assert prep.reference_passed and cpu.passed


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
@pytest.mark.parametrize("op", ["sum", "prod", "max", "min"])
def test_every_dtype_and_op_meets_the_postcondition(dtype, op):
    prep = prepare(WORKLOADS["allreduce_allpairs"](4), nbytes=4 * 32 * element_type(dtype).itemsize, dtype=dtype,
                   op=op)
    assert prep.reference_name == ("cpu" if dtype != "bfloat16" and op == "sum" else "emulator")
    assert prep.reference_passed, prep.reference_message


def test_max_is_the_elementwise_maximum_of_the_inputs():
    ir = ring_allreduce(5)
    prep = prepare(ir, nbytes=5 * 16 * 4, dtype="int32", op="max")
    expected = np.maximum.reduce([x.reshape(-1) for x in prep.inputs])
    for out in prep.reference:
        assert np.array_equal(out, expected)


def test_bfloat16_rounding_and_arithmetic():
    # Ties go to even, NaN stays a quiet NaN, and widening is exact.
    bits = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F800001], dtype=np.uint32)
    assert float32_to_bf16(bits.view(np.float32)).tolist() == [0x3F80, 0x3F82, 0x3F81, 0x7FC0]
    values = np.array([1.5, -2.25, 3.0], dtype=np.float32)
    assert np.array_equal(bf16_to_float32(float32_to_bf16(values)), values)
    add = reducer(element_type("bfloat16"), "sum")
    one, tiny = float32_to_bf16(np.float32([1.0])), float32_to_bf16(np.float32([2.0 ** -9]))
    assert add(one, tiny).tolist() == one.tolist()  # 1 + 2^-9 rounds back to 1 in bfloat16


def test_int32_sum_wraps_like_numpy():
    add = reducer(element_type("int32"), "sum")
    big = np.array([2**31 - 1], dtype=np.int32)
    assert add(big, np.array([1], dtype=np.int32)).tolist() == [-(2**31)]


def test_executing_without_cupy_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cupy", None)  # as if CuPy were not installed
    with pytest.raises(CudaUnavailableError, match=r"install the gpu extra: pip install 'collsynth\[gpu\]'"):
        execute_cuda(ring_allreduce(2), nbytes=64)
    with pytest.raises(CudaUnavailableError, match="gpu extra"):
        execute(ring_allreduce(2), backend="cuda", nbytes=64)


@given(workload=st.sampled_from(sorted(WORKLOADS)), n=st.integers(2, 5), instances=st.integers(1, 2),
       chunk_elems=st.integers(1, 40), slot_bytes=st.sampled_from([16, 48, 160, 1 << 16]), nslots=st.integers(1, 3),
       dtype=st.sampled_from(CPU_DTYPES), seed=st.integers(0, 1000))
def test_property_emulator_equals_cpu_on_any_size_and_slot_budget(workload, n, instances, chunk_elems, slot_bytes,
                                                                  nslots, dtype, seed):
    ir = WORKLOADS[workload](n, instances)
    prep, cpu = cpu_and_emulator(ir, chunk_elems, dtype, seed, nslots, slot_bytes)
    # With one slot a step that receives and sends (rrcs) waits for room its peer only makes in the same kind of
    # step: both references deadlock there, as MSCCL would.
    assert (cpu.failure == DEADLOCK) == (prep.reference_failure == DEADLOCK)
    if cpu.failure != DEADLOCK:
        assert_same_bits(prep.reference, cpu.outputs, dtype)


@given(n=st.integers(2, 4), data=st.data())
def test_property_random_step_orders_deadlock_on_both_or_neither(n, data):
    """AllToAll where every peer threadblock picks send-then-receive or receive-then-send at random."""
    ir = alltoall(n)
    gpus = []
    for gpu in ir.gpus:
        tbs = []
        for tb in gpu.tbs:
            if tb.send >= 0 and data.draw(st.booleans()):
                send, recv = tb.steps
                tb = replace(tb, steps=(replace(recv, s=0), replace(send, s=1)))
            tbs.append(tb)
        gpus.append(replace(gpu, tbs=tuple(tbs)))
    ir = replace(ir, gpus=tuple(gpus))
    nslots = data.draw(st.integers(1, 2))
    cpu = execute(ir, nbytes=n * 8 * 4, fifo_capacity=nslots)
    prep = prepare(ir, nbytes=n * 8 * 4, reference="emulator", nslots=nslots)
    assert (cpu.failure == DEADLOCK) == (prep.reference_failure == DEADLOCK)
    if cpu.passed:
        assert_same_bits(prep.reference, cpu.outputs, "float32")
