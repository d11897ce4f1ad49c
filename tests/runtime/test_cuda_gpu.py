"""The CUDA interpreter on a real GPU: bit-identical to the references, watchdog, residency, timing.

Marked `gpu` (deselected by default; run with `pytest -m gpu tests/runtime/test_cuda_gpu.py`) and skipped
with the reason when CuPy or a GPU is missing.
"""

from dataclasses import replace

import pytest

from collsynth.runtime import execute
from collsynth.runtime.cuda import CudaRunner, CudaUnavailableError, ResidencyError, execute_cuda, import_cupy, prepare
from collsynth.runtime.cuda.workloads import WORKLOADS, alltoall, ring_allgather, ring_allreduce
from collsynth.runtime.result import DEADLOCK

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def runner():
    try:
        import_cupy()
    except CudaUnavailableError as exc:
        pytest.skip(f"no GPU: {exc}")
    return CudaRunner(watchdog_s=2.0)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32"])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_workloads_are_bit_identical_to_the_reference(runner, workload, dtype):
    prep = prepare(WORKLOADS[workload](8, 2), nbytes=16 * 8 * 1000 * 4, dtype=dtype, seed=1)
    result = runner.execute(prep, warmup=0, iters=1)
    assert result.passed, str(result)
    assert result.backend == "cuda" and result.seconds > 0


@pytest.mark.parametrize("op", ["prod", "max", "min"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_other_reduction_ops_match_the_emulator(runner, op, dtype):
    prep = prepare(ring_allreduce(5), nbytes=5 * 4 * 256, dtype=dtype, op=op)
    result = runner.execute(prep, warmup=0, iters=1)
    assert result.passed, str(result)


@pytest.mark.parametrize("chunk_elems, slot_bytes, nslots", [(1, 1 << 16, 8), (1001, 64, 1), (4099, 512, 2),
                                                              (1 << 16, 256 << 10, 8)])
def test_tiles_slots_and_the_scalar_path(runner, chunk_elems, slot_bytes, nslots):
    """Odd sizes take the scalar path, pieces of 16 B the vector path with a short last tile, one slot the
    tightest pipeline."""
    ir = WORKLOADS["allreduce_allpairs"](4, 2)
    prep = prepare(ir, nbytes=8 * chunk_elems * 4, slot_bytes=slot_bytes, nslots=nslots, seed=chunk_elems)
    assert prep.runnable
    result = runner.execute(prep, warmup=0, iters=1)
    assert result.passed, str(result)


@pytest.mark.parametrize("build", [ring_allgather, ring_allreduce])
def test_inplace_programs(runner, build):
    ir = replace(build(4), inplace=True)
    result = runner.execute(prepare(ir, nbytes=4 * 4 * 512, seed=2), warmup=0, iters=1)
    assert result.passed, str(result)


def test_execute_dispatches_to_the_gpu():
    try:
        import_cupy()
    except CudaUnavailableError as exc:
        pytest.skip(f"no GPU: {exc}")
    result = execute(ring_allreduce(8), backend="cuda", nbytes=8 * 1024, dtype="float32")
    assert result.passed and result.backend == "cuda"
    extras = dict(result.extras)
    assert float(extras["kernel_us_median"]) > 0 and extras["reference"] == "cpu"


def test_watchdog_reports_a_deadlock_instead_of_hanging(runner):
    ir = alltoall(2)
    gpus = []
    for gpu in ir.gpus:  # both ranks receive before they send
        send, recv = gpu.tbs[0].steps
        gpus.append(replace(gpu, tbs=(replace(gpu.tbs[0], steps=(replace(recv, s=0), replace(send, s=1))),)
                            + gpu.tbs[1:]))
    prep = prepare(replace(ir, gpus=tuple(gpus)), nbytes=2 * 64 * 4, reference="emulator")
    assert prep.reference_failure == DEADLOCK and prep.flat is not None
    quick = CudaRunner(watchdog_s=0.2)
    result = quick.execute(prep, warmup=0, iters=1)
    assert not result.passed and result.failure == DEADLOCK
    assert "device watchdog" in result.message
    assert any("rank 0 tb 0 step 0" in line and "waiting to receive from rank 1" in line for line in result.details)
    # The GPU is still usable afterwards.
    assert runner.execute(prepare(ring_allreduce(2), nbytes=256), warmup=0, iters=1).passed


def test_too_many_blocks_are_refused(runner):
    ir = alltoall(16, 16)  # 16 * 16 * 16 threadblocks: more than any GPU keeps resident
    with pytest.raises(ResidencyError, match="resident"):
        runner.execute(prepare(ir, nbytes=16 * 16 * 16, reference="postcondition"), warmup=0, iters=1)


def test_timing_is_reported(runner):
    result = execute_cuda(ring_allreduce(8), nbytes=8 * 4096 * 4, warmup=1, iters=5)
    extras = dict(result.extras)
    assert result.passed
    assert float(extras["kernel_us_min"]) <= float(extras["kernel_us_median"]) == pytest.approx(result.seconds * 1e6,
                                                                                               rel=1e-3)
    assert int(extras["blocks"]) == 8 and extras["launch"].startswith(("cooperative", "normal"))


def test_blocks_longer_than_the_shared_step_rows_read_the_table_in_place(runner):
    """Blocks of up to 64 steps copy their step rows to shared memory; a 40-rank ring AllReduce has 78 steps
    per block, so it takes the other path."""
    ir = ring_allreduce(40)
    assert max(len(tb.steps) for gpu in ir.gpus for tb in gpu.tbs) > 64
    result = runner.execute(prepare(ir, nbytes=40 * 4 * 64, seed=3), warmup=0, iters=1)
    assert result.passed, str(result)
