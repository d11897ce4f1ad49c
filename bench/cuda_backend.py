"""CUDA interpreter on one GPU: `.venv/bin/python bench/cuda_backend.py` (needs the gpu extra and an NVIDIA GPU).

8-rank AllGather (ring), AllReduce (ring and all-pairs) and AllToAll (all-pairs), 1 KB to 1 GB per rank
(nccl-tests sizes: the per-rank buffer; for AllGather the gathered output). Every rank lives on the one
GPU, so the physical limit is the device's own memory bandwidth: the device-to-device copy bandwidth is
measured in the same run, and each row reports the bytes the kernel reads and writes per second against
the bytes a cudaMemcpy reads and writes per second. Each size runs with 1 instance and with the most
instances whose blocks fit one per SM; the faster is shown. Outputs are checked bit for bit against the
CPU interpreter up to --verify-max, and against the postcondition (exact: generated inputs) above it.

Targets: >= 80% of copy bandwidth at 256 MB and above; < 15 us for a 1 KB 8-rank all-pairs AllReduce.
Without a GPU it prints one "no GPU" line and exits 0.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

import numpy as np

from collsynth.core.units import format_size, parse_size
from collsynth.runtime.cuda import CudaBackendError, CudaRunner, CudaUnavailableError, import_cupy, prepare
from collsynth.runtime.cuda.workloads import allpairs_allreduce, alltoall, ring_allgather, ring_allreduce
from collsynth.runtime.layout import collective_for, make_inputs, plan_layout

# (collective, algorithm, IR builder, busbw factor as a function of n, size is the output buffer)
CASES = (
    ("AllGather", "ring", ring_allgather, lambda n: (n - 1) / n, True),
    ("AllReduce", "ring", ring_allreduce, lambda n: 2 * (n - 1) / n, False),
    ("AllReduce", "all-pairs", allpairs_allreduce, lambda n: 2 * (n - 1) / n, False),
    ("AllToAll", "all-pairs", alltoall, lambda n: (n - 1) / n, False),
)


def copy_bandwidth(cp, nbytes: int, repeats: int = 10) -> float:
    """Bytes per second of a device-to-device cudaMemcpy of `nbytes` (median of `repeats`)."""
    src = cp.ones(nbytes // 4, dtype=cp.float32)
    dst = cp.empty_like(src)
    times = []
    stream = cp.cuda.get_current_stream()
    for _ in range(repeats + 2):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                    stream.ptr)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    del src, dst
    cp.get_default_memory_pool().free_all_blocks()
    return nbytes / statistics.median(times[2:])


# The copy that stands for the device's memory bandwidth: large enough to reach it (a 64 KB copy measured 9.5 GB/s
# on an H200, 1 GB 2,100 GB/s), and the same whatever sizes the run covers.
COPY_PROBE_DEFAULT = "1GB"
EMPTY_KERNEL = 'extern "C" __global__ void collsynth_empty() {}'


def launch_floor(runner: CudaRunner, nblocks: int, threads: int = 512, repeats: int = 50) -> float:
    """Seconds from start event to end event around an empty kernel launched as the interpreter is (cooperative
    where the GPU has it, `nblocks` blocks): the part of every measured time that no program can avoid."""
    cp = runner.cp
    kernel = cp.RawModule(code=EMPTY_KERNEL).get_function("collsynth_empty")
    driver, stream = cp.cuda.driver, cp.cuda.get_current_stream()
    times = []
    for _ in range(repeats + 5):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        if runner.cooperative:
            driver.launchCooperativeKernel(kernel.kernel.ptr, nblocks, 1, 1, threads, 1, 1, 0, stream.ptr, 0)
        else:
            driver.launchKernel(kernel.kernel.ptr, nblocks, 1, 1, threads, 1, 1, 0, stream.ptr, 0, 0)
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
    return statistics.median(times[5:])


def max_instances(build, n: int, capacity: int) -> int:
    """The most instances (a power of two) whose threadblocks fit `capacity` resident blocks."""
    k = 1
    while sum(len(g.tbs) for g in build(n, 2 * k).gpus) <= capacity and k < 64:
        k *= 2
    return k


def run_case(runner: CudaRunner, build, n: int, instances: int, nbytes: int, inputs, reference: str, args):
    ir = build(n, instances)
    prep = prepare(ir, nbytes=nbytes, inputs=inputs, reference=reference)
    return runner.execute(prep, warmup=args.warmup, iters=args.iters)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--min-size", default="1KB")
    parser.add_argument("--max-size", default="1GB")
    parser.add_argument("--verify-max", default="64MB", help="largest size checked bit for bit against the CPU")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--copy-size", default=COPY_PROBE_DEFAULT,
                        help="size of the device-to-device copy that measures the memory bandwidth")
    parser.add_argument("--cases", default=None,
                        help="comma-separated COLLECTIVE or COLLECTIVE/algorithm to run (default: all), "
                             "e.g. AllToAll,AllReduce/all-pairs")
    parser.add_argument("--json", default=None, help="also write every run (each instance count) to this file")
    args = parser.parse_args()
    try:
        cp = import_cupy()
    except CudaUnavailableError as exc:
        print(f"no GPU: {exc}")
        return 0
    n = args.ranks
    lo, hi, verify_max = parse_size(args.min_size), parse_size(args.max_size), parse_size(args.verify_max)
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= 4
    runner = CudaRunner()
    copy_bw = copy_bandwidth(cp, parse_size(args.copy_size))
    print(f"device: {runner.device_name}, {runner.sm_count} SMs; device-to-device copy: {copy_bw / 1e9:.1f} GB/s "
          f"({2 * copy_bw / 1e9:.1f} GB/s read+write)")
    header = (f"{'collective':<10} {'algorithm':<10} {'size':>7} {'inst':>4} {'blocks':>6} {'time (us)':>11} "
              f"{'algbw GB/s':>10} {'busbw GB/s':>10} {'mem GB/s':>9} {'% copy':>7}  check")
    floors = {blocks: launch_floor(runner, blocks) for blocks in (8, 64, 128)}
    print("empty kernel, launched the same way (event to event): "
          + ", ".join(f"{blocks} blocks {seconds * 1e6:.2f} us" for blocks, seconds in floors.items()))
    wanted = [case.strip().lower() for case in args.cases.split(",")] if args.cases else None
    print(header)
    print("-" * len(header))
    findings: dict = {"bw": [], "latency": None}
    runs: list[dict] = []
    for coll_name, algo, build, factor, size_is_output in CASES:
        if wanted is not None and coll_name.lower() not in wanted and f"{coll_name}/{algo}".lower() not in wanted:
            continue
        capacity = runner.sm_count  # one block per SM at the largest block size
        wide = max_instances(build, n, capacity)
        for size in sizes:
            nbytes = size // n if size_is_output else size
            best = None
            base_ir = build(n, 1)
            layout = plan_layout(base_ir, collective_for(base_ir), nbytes, np.dtype(np.float32))
            inputs = [x.reshape(-1) for x in make_inputs(layout, np.dtype(np.float32), seed=1)]
            reference = "cpu" if size <= verify_max else "postcondition"
            for instances in sorted({1, wide}):
                try:
                    result = run_case(runner, build, n, instances, nbytes, inputs, reference, args)
                except CudaBackendError as exc:
                    print(f"{coll_name:<10} {algo:<10} {format_size(size):>7} {instances:>4} skipped: {exc}")
                    continue
                finally:
                    cp.get_default_memory_pool().free_all_blocks()
                runs.append({"collective": coll_name, "algorithm": algo, "size": size, "nbytes_per_rank": nbytes,
                             "instances": instances, "seconds": result.seconds, "passed": result.passed,
                             **dict(result.extras)})
                if best is None or result.seconds < best[1].seconds:
                    best = (instances, result)
            if best is None:
                continue
            instances, result = best
            extras = dict(result.extras)
            seconds = result.seconds
            algbw = size / seconds / 1e9
            mem = int(extras["device_bytes_accessed"]) / seconds
            share = mem / (2 * copy_bw) * 100
            check = ("PASS" if result.passed else "FAIL") + f" ({extras['reference']})"
            print(f"{coll_name:<10} {algo:<10} {format_size(size):>7} {instances:>4} {extras['blocks']:>6} "
                  f"{seconds * 1e6:>11.2f} {algbw:>10.2f} {algbw * factor(n):>10.2f} {mem / 1e9:>9.1f} "
                  f"{share:>6.1f}%  {check}")
            if not result.passed:
                print(f"    {result.message}")
            if size >= 256 << 20:
                findings["bw"].append((coll_name, algo, size, share))
            if coll_name == "AllReduce" and algo == "all-pairs" and size == 1 << 10:
                findings["latency"] = seconds * 1e6
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": runner.device_name, "sm_count": runner.sm_count, "ranks": n,
                       "empty_kernel_seconds": {str(blocks): seconds for blocks, seconds in floors.items()},
                       "copy_bytes_per_s": copy_bw, "runs": runs}, out, indent=1)
    if findings["bw"]:
        worst = min(findings["bw"], key=lambda row: row[3])
        verdict = "met" if worst[3] >= 80 else "NOT met"
        print(f"target >= 80% of copy bandwidth at >= 256MB: {verdict} (lowest {worst[3]:.1f}%: {worst[0]} "
              f"{worst[1]} {format_size(worst[2])})")
    if findings["latency"] is not None:
        verdict = "met" if findings["latency"] < 15 else "NOT met"
        print(f"target < 15 us for a 1KB {n}-rank all-pairs AllReduce: {verdict} ({findings['latency']:.2f} us)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
