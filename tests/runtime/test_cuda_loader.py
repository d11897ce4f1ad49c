"""The CuPy loader, end to end, against a stand-in for CuPy whose kernel launch runs the kernel's numpy model.

The stand-in decodes the launch parameters exactly as the kernel's signature declares them (pointer,
int64, int32 and uint64 values read back from the ctypes parameter array), so these tests check the
argument order and types, the device arrays, the residency plan, the deadlock report and the result
assembly of backend.py and bench/cuda_backend.py on machines without a GPU.
"""

import ctypes
import importlib.util
import itertools
import json
import re
import sys
import time
import types
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from collsynth.runtime.cuda import CudaRunner, ResidencyError, execute_cuda, prepare
from collsynth.runtime.cuda.build import kernel_source
from collsynth.runtime.cuda.emulate import DeadlockError, emulate
from collsynth.runtime.cuda.flatten import FlatProgram
from collsynth.runtime.cuda.numerics import DTYPES
from collsynth.runtime.cuda.workloads import WORKLOADS, alltoall, ring_allreduce
from collsynth.runtime.result import DEADLOCK, MISMATCH

# The kernel's parameter list, read from the source: (ctypes type, name) in order.
_CTYPES = {"void*": ctypes.c_void_p, "const i64*": ctypes.c_void_p, "u64*": ctypes.c_void_p,
           "i64*": ctypes.c_void_p, "unsigned int*": ctypes.c_void_p, "i64": ctypes.c_int64, "int": ctypes.c_int32,
           "u64": ctypes.c_uint64}


def kernel_parameters():
    body = re.search(r"collsynth_interp_##SUFFIX##_##OPNAME\((.*?)\)\s*\{", kernel_source(), re.S).group(1)
    params = []
    for part in body.replace("\\", " ").split(","):
        words = part.split()
        kind, name = " ".join(words[:-1]), words[-1]
        params.append((_CTYPES[kind.replace(" *", "*")], name))
    return params


class FakeArray:
    def __init__(self, gpu, array):
        self.gpu, self.a = gpu, array
        self.data = types.SimpleNamespace(ptr=gpu.register(self))

    nbytes = property(lambda self: self.a.nbytes)

    def get(self):
        return self.a.copy()

    def fill(self, value):
        self.a.fill(value)

    def copy(self):
        return FakeArray(self.gpu, self.a.copy())


class FakeEvent:
    def __init__(self):
        self.at = 0.0

    def record(self, stream=None):
        self.at = time.perf_counter()

    done = True

    def synchronize(self):
        pass


class FakeCupy(types.ModuleType):
    """Just the CuPy surface backend.py and bench/cuda_backend.py use."""

    uint64, int64, uint32, float32 = np.uint64, np.int64, np.uint32, np.float32

    def __init__(self, sm_count=4, blocks_per_sm=2, cooperative=True):
        super().__init__("cupy")
        self.arrays, self.functions, self.launches = {}, {}, []
        self.counter = itertools.count(4096, 256)
        self.blocks_per_sm = blocks_per_sm
        self.params = kernel_parameters()
        fake = self

        class CUDADriverError(RuntimeError):
            pass

        class Function:
            def __init__(self, name):
                self.kernel = types.SimpleNamespace(ptr=next(fake.counter))
                fake.functions[self.kernel.ptr] = name

        class RawModule:
            def __init__(self, code, options=()):
                assert ("collsynth_interp" in code or "collsynth_empty" in code) and not options

            def get_function(self, name):
                return Function(name)

        device = types.SimpleNamespace(id=0, attributes={"MultiProcessorCount": sm_count,
                                                         "CooperativeLaunch": int(cooperative)})
        driver = types.SimpleNamespace(
            CUDADriverError=CUDADriverError,
            occupancyMaxActiveBlocksPerMultiprocessor=lambda ptr, threads, smem: self.blocks_per_sm * 512 // threads,
            launchCooperativeKernel=lambda *args: self.launch("cooperative", *args),
            launchKernel=lambda *args: self.launch("normal", *args[:-1]))
        runtime = types.SimpleNamespace(
            getDeviceCount=lambda: 1, getDeviceProperties=lambda i: {"name": b"Fake GPU"},
            memcpyDeviceToDevice=3,
            memcpyAsync=lambda dst, src, n, kind, stream: self.copy_bytes(dst, src, n))
        self.cuda = types.SimpleNamespace(
            runtime=runtime, driver=driver, Device=lambda: device, Event=FakeEvent,
            compiler=types.SimpleNamespace(CompileException=RuntimeError),
            get_current_stream=lambda: types.SimpleNamespace(ptr=0),
            get_elapsed_time=lambda start, end: max((end.at - start.at) * 1e3, 1e-6))
        self.RawModule = RawModule

    def register(self, array):
        ptr = next(self.counter)
        self.arrays[ptr] = array
        return ptr

    def asarray(self, array):
        return FakeArray(self, np.array(array))

    def zeros(self, shape, dtype):
        return FakeArray(self, np.zeros(shape, dtype=dtype))

    def ones(self, shape, dtype):
        return FakeArray(self, np.ones(shape, dtype=dtype))

    def empty_like(self, other):
        return FakeArray(self, np.empty_like(other.a))

    def copyto(self, dst, src):
        dst.a[...] = src.a

    def copy_bytes(self, dst, src, nbytes):
        self.arrays[dst].a.view(np.uint8)[:nbytes] = self.arrays[src].a.view(np.uint8)[:nbytes]

    def get_default_memory_pool(self):
        return types.SimpleNamespace(free_all_blocks=lambda: None)

    def launch(self, mode, func, gx, gy, gz, bx, by, bz, smem, stream, params_address):
        """Decode the parameters as the kernel declares them and run the kernel's model on the arrays."""
        if self.functions[func] == "collsynth_empty":  # the bench's launch-floor kernel: no parameters
            assert params_address == 0
            self.launches.append((mode, gx, bx))
            return
        pointers = (ctypes.c_void_p * len(self.params)).from_address(params_address)
        args = {name: ctype.from_address(pointers[i]).value for i, (ctype, name) in enumerate(self.params)}
        arr = {name: self.arrays[args[name]].a for name in
               ("data", "fifo", "blocks", "steps", "conns", "tail", "head", "progress", "status", "abort_flag")}
        suffix, op = self.functions[func].removeprefix("collsynth_interp_").split("_")
        dtype = next(dt for dt in DTYPES.values() if dt.suffix == suffix)
        assert arr["data"].dtype == dtype.storage and arr["fifo"].dtype == dtype.storage
        assert gx == arr["blocks"].shape[0] and (gy, gz, by, bz, smem) == (1, 1, 1, 1, 0) and bx in (128, 256, 512)
        flat = FlatProgram(
            name="fake", ngpus=int(arr["blocks"][:, 0].max()) + 1, itemsize=dtype.itemsize,
            chunk_elems=args["chunk_elems"], piece_elems=args["piece_elems"], ntiles=args["ntiles"],
            nslots=args["nslots"], slot_elems=args["slot_elems"], vectorize=bool(args["vectorize"]),
            data_elems=arr["data"].size, fifo_elems=arr["fifo"].size, buffer_base=None, buffer_chunks=None,
            blocks=arr["blocks"], steps=arr["steps"], conns=arr["conns"][:len(arr["tail"])])
        assert args["budget_ns"] > 0
        self.launches.append((mode, gx, bx))
        try:
            arr["status"][...] = emulate(flat, arr["data"], dtype, op)
        except DeadlockError as exc:
            arr["abort_flag"][0] = 1
            arr["status"][...] = exc.status


@pytest.fixture
def fake_cupy(monkeypatch):
    fake = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    return fake


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
@pytest.mark.parametrize("workload", sorted(WORKLOADS))
def test_execute_cuda_end_to_end(fake_cupy, workload, dtype):
    ir = WORKLOADS[workload](4, 1)
    result = execute_cuda(ir, nbytes=4 * 20 * 4, dtype=dtype, slot_bytes=32, warmup=1, iters=3)
    assert result.passed, str(result)
    extras = dict(result.extras)
    assert extras["reference"] == ("emulator" if dtype == "bfloat16" else "cpu")
    nblocks = sum(len(gpu.tbs) for gpu in ir.gpus)
    assert extras["threads"] == ("512" if nblocks <= 8 else "256")  # 4 SMs x 2 blocks/SM at 512 threads
    assert extras["launch"] == "cooperative" and extras["device"] == "Fake GPU"
    assert float(extras["kernel_us_median"]) > 0 and int(extras["bytes_between_ranks"]) > 0
    assert len(fake_cupy.launches) == 1 + 1 + 3  # checked run, warm-up, timed runs
    assert result.backend == "cuda" and result.tiles > 1 and len(result.outputs) == 4


def test_the_threads_shrink_until_every_block_is_resident(fake_cupy):
    ir = alltoall(4, 1)  # 16 blocks; 4 SMs x 2 blocks at 512 threads = 8, x 4 at 256 = 16
    result = execute_cuda(ir, nbytes=4 * 8 * 4, iters=1)
    assert result.passed and dict(result.extras)["threads"] == "256"
    with pytest.raises(ResidencyError, match=r"needs 64 resident threadblocks .* at most 32 \(4 SMs x 8"):
        execute_cuda(alltoall(4, 4), nbytes=16 * 8 * 4, iters=1)


def test_a_gpu_without_cooperative_launch_uses_a_normal_one(monkeypatch):
    fake = FakeCupy(cooperative=False)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    result = execute_cuda(ring_allreduce(3), nbytes=3 * 16 * 4, iters=1)
    assert result.passed and dict(result.extras)["launch"].startswith("normal")
    assert {mode for mode, _, _ in fake.launches} == {"normal"}


def test_the_device_watchdog_report_becomes_a_deadlock_result(fake_cupy):
    ir = alltoall(2)
    gpus = []
    for gpu in ir.gpus:
        send, recv = gpu.tbs[0].steps
        gpus.append(replace(gpu, tbs=(replace(gpu.tbs[0], steps=(replace(recv, s=0), replace(send, s=1))),)
                            + gpu.tbs[1:]))
    prep = prepare(replace(ir, gpus=tuple(gpus)), nbytes=2 * 16 * 4, reference="emulator")
    result = CudaRunner(watchdog_s=0.5).execute(prep, warmup=0, iters=1)
    assert not result.passed and result.failure == DEADLOCK
    assert "device watchdog: a wait exceeded 0.5 s" in result.message
    assert result.details == ("rank 0 tb 0 step 0 (tile 0 of 1): waiting to receive from rank 1 on channel 0",
                              "rank 1 tb 0 step 0 (tile 0 of 1): waiting to receive from rank 0 on channel 0")


def test_a_wrong_kernel_result_is_reported_with_where_it_differs(fake_cupy):
    real_launch = fake_cupy.launch

    def corrupting_launch(*args):
        real_launch(*args)
        data = next(a.a for a in fake_cupy.arrays.values() if a.a.dtype == np.float32 and a.a.size > 100)
        data[-1] += 1  # the last element of rank 2's output

    fake_cupy.launch = corrupting_launch
    fake_cupy.cuda.driver.launchCooperativeKernel = lambda *args: fake_cupy.launch("cooperative", *args)
    result = execute_cuda(ring_allreduce(3), nbytes=3 * 16 * 4, iters=1)
    assert not result.passed and result.failure == MISMATCH
    assert re.search(r"rank 2 output\[2\] element 15: cuda .*, cpu ", result.message)


def test_results_carry_the_cpu_verdict_layout(fake_cupy):
    result = execute_cuda(ring_allreduce(2), nbytes=2 * 8 * 4, iters=1)
    assert result.verdict().startswith("PASS  AllReduce  ngpus=2  size=64B  dtype=float32")
    assert result.verdict().endswith("backend=cuda")


def test_bench_runs_end_to_end(fake_cupy, capsys, monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("bench_cuda", Path(__file__).parents[2] / "bench" / "cuda_backend.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    fake_cupy.blocks_per_sm = 16  # room for the wide (many-instance) variants
    monkeypatch.setattr(sys, "argv", ["bench/cuda_backend.py", "--ranks", "4", "--max-size", "4KB", "--iters", "1",
                                      "--warmup", "0", "--verify-max", "1KB", "--json", str(tmp_path / "runs.json"),
                                      "--copy-size", "64KB"])
    assert bench.main() == 0
    out = capsys.readouterr().out
    assert "device: Fake GPU, 4 SMs" in out
    assert "empty kernel, launched the same way (event to event): 8 blocks" in out
    rows = [line for line in out.splitlines() if line.startswith(("AllGather", "AllReduce", "AllToAll"))]
    assert len(rows) == 4 * 2  # 4 algorithms x (1KB, 4KB)
    assert all("PASS (cpu)" in row for row in rows if " 1KB " in row)
    assert all("PASS (postcondition)" in row for row in rows if " 4KB " in row)
    assert "target < 15 us for a 1KB 4-rank all-pairs AllReduce" in out
    recorded = json.loads((tmp_path / "runs.json").read_text())
    assert recorded["device"] == "Fake GPU" and recorded["ranks"] == 4
    assert len(recorded["runs"]) >= len(rows)  # every instance count that ran, not just the best
    assert {run["size"] for run in recorded["runs"]} == {1024, 4096}


def test_bench_cases_selects_collectives_and_algorithms(fake_cupy, capsys, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_cuda", Path(__file__).parents[2] / "bench" / "cuda_backend.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    monkeypatch.setattr(sys, "argv", ["bench/cuda_backend.py", "--ranks", "4", "--max-size", "1KB", "--iters", "1",
                                      "--warmup", "0", "--copy-size", "64KB", "--cases", "alltoall,AllReduce/ring"])
    assert bench.main() == 0
    rows = [line.split()[:2] for line in capsys.readouterr().out.splitlines()
            if line.startswith(("AllGather", "AllReduce", "AllToAll"))]
    assert rows == [["AllReduce", "ring"], ["AllToAll", "all-pairs"]]
