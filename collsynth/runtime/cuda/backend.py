"""The CUDA interpreter backend: `execute_cuda(ir, ...)` runs an IR on one GPU through CuPy.

Everything that can be decided without a GPU (layout, flattening, inputs, the reference outputs) is
done before CuPy is imported, so bad IRs and bad requests fail the same way on any machine. CuPy is
the optional `gpu` extra and is imported lazily.

The reference: the CPU interpreter on the same inputs (float32, float16, int32 with sum), else the
kernel's numpy model (emulate.py: bfloat16, prod/max/min). The CUDA outputs must equal it bit for bit
on every output chunk the postcondition checks or the program writes.
"""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.collectives.spec import Collective, display_name
from collsynth.ir import Algo
from collsynth.ir.validate import validate
from collsynth.runtime.check import check_outputs
from collsynth.runtime.cuda.build import kernel_source
from collsynth.runtime.cuda.emulate import DeadlockError, deadlock_message, emulate
from collsynth.runtime.cuda.flatten import (
    DEFAULT_NSLOTS,
    DEFAULT_SLOT_BYTES,
    STATE_STUCK,
    STATUS_COLS,
    CudaBackendError,
    FlatProgram,
    MessageMismatchError,
    OutOfBoundsError,
    ResidencyError,
    check_residency,
    flatten,
    output_written_mask,
    traffic_bytes,
)
from collsynth.runtime.cuda.numerics import (
    ElementType,
    element_type,
    kernel_name,
    reduction_op,
)
from collsynth.runtime.layout import (
    BufferLayout,
    coerce_inputs,
    collective_for,
    input_nbytes,
    layout_problem,
    make_inputs,
    plan_layout,
)
from collsynth.runtime.numerics import to_storage
from collsynth.runtime.result import (
    DEADLOCK,
    LAYOUT,
    LEFTOVER,
    MESSAGE_SIZE,
    MISMATCH,
    UNWRITTEN_READ,
    ExecutionResult,
)

GPU_EXTRA_HINT = "install the gpu extra: pip install 'collsynth[gpu]'"
CPU_DTYPES = frozenset({"float32", "float16", "int32"})  # what the CPU interpreter can be the reference for
THREAD_CHOICES = (512, 256, 128)


class CudaUnavailableError(CudaBackendError):
    """No CuPy or no CUDA GPU here."""


def import_cupy():
    """CuPy with a visible GPU, or CudaUnavailableError saying how to get one."""
    try:
        import cupy
    except ImportError:
        raise CudaUnavailableError(f"the CUDA backend needs CuPy, which is not installed; {GPU_EXTRA_HINT}") from None
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # the CUDA runtime reports a missing driver/device as various errors
        raise CudaUnavailableError(f"CuPy cannot reach a CUDA GPU ({exc}); run on a machine with an NVIDIA GPU, "
                                   "or use --backend cpu") from None
    if count < 1:
        raise CudaUnavailableError("no CUDA GPU is visible; run on a machine with an NVIDIA GPU, or use --backend cpu")
    return cupy


# Failures that mean the program itself is broken: found by the reference, so the GPU need not run.
PROGRAM_FAILURES = frozenset({DEADLOCK, LAYOUT, MESSAGE_SIZE, LEFTOVER, UNWRITTEN_READ})


@dataclass(frozen=True)
class Prepared:
    """Everything decided on the host: the collective, layout, flat program, inputs, and the reference."""

    ir: Algo
    collective: Collective
    layout: BufferLayout
    dtype: ElementType
    op: str
    inputs: tuple[np.ndarray, ...]  # per rank (input_chunks, chunk_elems), stored bits
    flat: FlatProgram | None  # None when the program cannot be flattened (see reference_failure)
    reference: tuple[np.ndarray, ...]  # per rank flat output buffer the kernel must reproduce bit for bit
    reference_name: str  # "cpu" or "emulator"
    reference_passed: bool
    reference_failure: str | None  # an ExecutionResult failure kind
    reference_message: str
    reference_details: tuple[str, ...] = ()
    compare_mask: tuple[np.ndarray, ...] = ()  # per rank: which output chunks to compare

    @property
    def runnable(self) -> bool:
        """False when the reference already shows the program cannot run correctly (no GPU run needed)."""
        return self.flat is not None and self.reference_failure not in PROGRAM_FAILURES

    @property
    def program(self) -> FlatProgram:
        """The flat program; only runnable preparations have one."""
        if self.flat is None:
            raise CudaBackendError(f"{self.ir.name}: cannot run on the GPU: {self.reference_message}")
        return self.flat

    def host_arena(self) -> np.ndarray:
        """The initial data arena: inputs in place, everything else zero."""
        data = np.zeros(self.program.data_elems, dtype=self.dtype.storage)
        for rank, values in enumerate(self.inputs):
            self.program.buffer_view(data, rank, "i")[...] = values
        return data

    def outputs_of(self, data: np.ndarray) -> tuple[np.ndarray, ...]:
        flat = self.program
        return tuple(flat.buffer_view(data, rank, "o").reshape(-1).copy() for rank in range(flat.ngpus))


def prepare(ir: Algo, nbytes: int | None = None, dtype: str = "float32", seed: int = 0,
            collective: Collective | None = None, inputs: Sequence[np.ndarray] | None = None, *, op: str = "sum",
            nslots: int = DEFAULT_NSLOTS, slot_bytes: int = DEFAULT_SLOT_BYTES, tile_bytes: int | None = None,
            reference: str = "auto", root: int | None = None) -> Prepared:
    """The host half of execute_cuda (no GPU needed): layout, flattening, inputs and reference outputs.

    `reference`: "cpu" (the CPU interpreter with FIFOs of `nslots` messages, as the kernel's; sum on
    float32/float16/int32 only), "emulator" (the kernel's numpy model), "auto" (the CPU interpreter
    where it can, else the emulator), or "postcondition" (no reference run: the CUDA outputs are checked
    against the collective's postcondition only; for large benchmark sizes, sum only)."""
    validate(ir, max_steps_per_tb=None)
    etype = element_type(dtype)
    op = reduction_op(op)
    if reference not in ("auto", "cpu", "emulator", "postcondition"):
        raise CudaBackendError(f"reference {reference!r} is not one of auto, cpu, emulator, postcondition")
    if reference == "postcondition" and op != "sum":
        raise CudaBackendError("reference='postcondition' checks sums only; use reference='emulator' for op "
                               f"{op!r}")
    use_cpu = reference == "cpu" or (reference == "auto" and etype.name in CPU_DTYPES and op == "sum")
    if use_cpu and (etype.name not in CPU_DTYPES or op != "sum"):
        raise CudaBackendError(f"the CPU interpreter cannot be the reference for {etype.name} with op {op}; "
                               "use reference='emulator'")
    coll = collective_for(ir, collective, root)
    if nbytes is None and inputs is not None:
        nbytes = input_nbytes(inputs, etype.storage)
    layout = plan_layout(ir, coll, nbytes, etype.storage, tile_bytes)
    if inputs is not None:
        ins = coerce_inputs(layout, etype.storage, [to_storage(etype.format, x) for x in inputs])
    else:  # exact for the op in any order (products too), so the check can be bit-exact
        ins = make_inputs(layout, etype.name, seed, op)
    base: dict[str, Any] = dict(ir=ir, collective=coll, layout=layout, dtype=etype, op=op, inputs=tuple(ins),
                reference_name="cpu" if use_cpu else reference if reference == "postcondition" else "emulator")

    def broken(kind: str, message: str, details: Sequence[str] = (), flat: FlatProgram | None = None) -> Prepared:
        return Prepared(**base, flat=flat, reference=(), reference_passed=False, reference_failure=kind,
                        reference_message=message, reference_details=tuple(details))

    problem = layout_problem(ir, layout)
    if problem:
        return broken(LAYOUT, problem)
    cpu = None
    if use_cpu:
        from collsynth.runtime import execute

        cpu = execute(ir, backend="cpu", nbytes=layout.input_chunks * layout.chunk_elems * etype.itemsize,
                      dtype=etype.name, seed=seed, collective=coll, inputs=list(ins), fifo_capacity=nslots)
        if cpu.failure in PROGRAM_FAILURES:
            return broken(cpu.failure, cpu.message, cpu.details)
    try:
        flat = flatten(ir, layout, etype.itemsize, nslots=nslots, slot_bytes=slot_bytes)
    except OutOfBoundsError as exc:
        return broken(LAYOUT, str(exc))
    except MessageMismatchError as exc:
        return broken(exc.kind, str(exc))
    written = output_written_mask(flat)
    checked = [np.zeros(layout.output_chunks, dtype=bool) for _ in range(layout.ngpus)]
    for _, rank, index in coll.outputs:
        checked[rank][index] = True
    base["compare_mask"] = tuple(w | c for w, c in zip(written, checked, strict=True))
    if reference == "postcondition":
        return Prepared(**base, flat=flat, reference=(), reference_passed=True, reference_failure=None,
                        reference_message="no reference run")
    if cpu is not None:
        return Prepared(**base, flat=flat, reference=tuple(np.asarray(x).reshape(-1) for x in cpu.outputs),
                        reference_passed=cpu.passed, reference_failure=cpu.failure, reference_message=cpu.message,
                        reference_details=cpu.details)
    data = np.zeros(flat.data_elems, dtype=etype.storage)
    for rank, values in enumerate(ins):
        flat.buffer_view(data, rank, "i")[...] = values
    try:
        emulate(flat, data, etype, op)
    except DeadlockError as exc:
        return broken(DEADLOCK, str(exc), exc.details, flat)
    outs = tuple(flat.buffer_view(data, rank, "o").copy() for rank in range(flat.ngpus))
    passed, message = _postcondition(coll, etype, op, ins, outs, exact=inputs is None)
    return Prepared(**base, flat=flat, reference=tuple(o.reshape(-1) for o in outs), reference_passed=passed,
                    reference_failure=None if passed else MISMATCH, reference_message=message)


def _postcondition(coll: Collective, etype: ElementType, op: str, inputs: Sequence[np.ndarray],
                   outputs: Sequence[np.ndarray], *, exact: bool) -> tuple[bool, str]:
    """The collective's postcondition for any op and dtype: the CPU side's check (bfloat16 as uint16 bits)."""
    outcome = check_outputs(coll, inputs, outputs, exact=exact, op=op, dtype=etype.name)
    return outcome.passed, outcome.message


def compare_outputs(prep: Prepared, outputs: Sequence[np.ndarray]) -> list[str]:
    """Lines naming where the CUDA outputs differ bit-wise from the reference (empty when identical)."""
    E = prep.program.chunk_elems
    lines = []
    for rank, (got, want, mask) in enumerate(zip(outputs, prep.reference, prep.compare_mask, strict=True)):
        got_bits = got.reshape(-1, E).view(np.dtype(f"u{prep.dtype.itemsize}"))
        want_bits = np.asarray(want).astype(prep.dtype.storage, copy=False).reshape(-1, E).view(got_bits.dtype)
        rows = np.flatnonzero(mask)
        bad = rows[np.any(got_bits[rows] != want_bits[rows], axis=1)]
        for row in bad[:4]:
            elem = int(np.flatnonzero(got_bits[row] != want_bits[row])[0])
            lines.append(f"rank {rank} output[{row}] element {elem}: cuda {got.reshape(-1, E)[row, elem]!r}, "
                         f"{prep.reference_name} {np.asarray(want).reshape(-1, E)[row, elem]!r}")
    return lines


@dataclass(frozen=True)
class LaunchPlan:
    threads: int
    blocks_per_sm: int
    sm_count: int
    cooperative: bool


class CudaRunner:
    """A compiled interpreter module on the current CUDA device; reusable across IRs (bench keeps one)."""

    def __init__(self, *, watchdog_s: float = 5.0, threads: int | None = None) -> None:
        self.cp = import_cupy()
        self.watchdog_s = float(watchdog_s)
        self.threads = threads
        # NVRTC with CuPy's default options (C++14): the source needs nothing newer and includes no headers.
        self.module = self.cp.RawModule(code=kernel_source())
        device = self.cp.cuda.Device()
        self.sm_count = int(device.attributes["MultiProcessorCount"])
        self.cooperative = bool(device.attributes.get("CooperativeLaunch", 0))
        self.device_name = self.cp.cuda.runtime.getDeviceProperties(device.id)["name"].decode()

    def kernel(self, dtype: ElementType, op: str):
        try:
            return self.module.get_function(kernel_name(dtype, op))
        except self.cp.cuda.compiler.CompileException as exc:
            raise CudaBackendError(f"the CUDA interpreter kernel failed to compile: {exc}") from None

    def plan(self, kernel, nblocks: int, name: str) -> LaunchPlan:
        """The largest block size at which every block of the IR is resident at once (or ResidencyError)."""
        driver = self.cp.cuda.driver
        choices = (self.threads,) if self.threads else THREAD_CHOICES
        best = 0
        for threads in choices:
            per_sm = int(driver.occupancyMaxActiveBlocksPerMultiprocessor(kernel.kernel.ptr, threads, 0))
            best = max(best, per_sm)
            if nblocks <= per_sm * self.sm_count:
                return LaunchPlan(threads, per_sm, self.sm_count, self.cooperative)
        check_residency(nblocks, self.sm_count, best, name=name)
        raise ResidencyError(f"{name}: cannot make {nblocks} blocks resident")  # unreachable: check_residency raised

    def device_arrays(self, prep: Prepared):
        cp, flat = self.cp, prep.program
        return {
            "data": cp.asarray(prep.host_arena()),
            "fifo": cp.zeros(flat.fifo_elems, dtype=prep.dtype.storage),
            "blocks": cp.asarray(flat.blocks), "steps": cp.asarray(flat.steps.reshape(-1, 8)),
            "conns": cp.asarray(flat.conns if flat.nconns else np.zeros((1, 6), dtype=np.int64)),
            "tail": cp.zeros(max(flat.nconns, 1), dtype=cp.uint64),
            "head": cp.zeros(max(flat.nconns, 1), dtype=cp.uint64),
            "progress": cp.zeros(flat.nblocks, dtype=cp.uint64),
            "status": cp.zeros((flat.nblocks, STATUS_COLS), dtype=cp.int64),
            "abort": cp.zeros(1, dtype=cp.uint32),
        }

    def run_once(self, kernel, plan: LaunchPlan, prep: Prepared, arrays, pristine) -> float:
        """One launch from the initial buffers; returns its kernel time in seconds (CUDA events)."""
        cp, flat = self.cp, prep.program
        cp.copyto(arrays["data"], pristine)
        for key in ("tail", "head", "progress", "status", "abort"):
            arrays[key].fill(0)
        stream = cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        names = ("data", "fifo", "blocks", "steps", "conns", "tail", "head", "progress", "status", "abort")
        args: list[tuple[Any, int]] = [(ctypes.c_void_p, arrays[k].data.ptr) for k in names]
        args += [(ctypes.c_int64, flat.chunk_elems), (ctypes.c_int64, flat.piece_elems),
                 (ctypes.c_int64, flat.ntiles), (ctypes.c_int64, flat.slot_elems), (ctypes.c_int32, flat.nslots),
                 (ctypes.c_int32, int(flat.vectorize)), (ctypes.c_uint64, int(self.watchdog_s * 1e9))]
        holders = [ctype(value) for ctype, value in args]
        params = (ctypes.c_void_p * len(holders))(*[ctypes.addressof(h) for h in holders])
        driver = self.cp.cuda.driver
        start.record(stream)
        try:
            if plan.cooperative:
                driver.launchCooperativeKernel(kernel.kernel.ptr, flat.nblocks, 1, 1, plan.threads, 1, 1, 0,
                                               stream.ptr, ctypes.addressof(params))
            else:
                driver.launchKernel(kernel.kernel.ptr, flat.nblocks, 1, 1, plan.threads, 1, 1, 0, stream.ptr,
                                    ctypes.addressof(params), 0)
        except driver.CUDADriverError as exc:
            if "COOPERATIVE_LAUNCH_TOO_LARGE" in str(exc):
                raise ResidencyError(f"{prep.ir.name}: the GPU refused to make all {flat.nblocks} blocks resident "
                                     f"({exc}); use fewer instances/channels") from None
            raise CudaBackendError(f"{prep.ir.name}: kernel launch failed: {exc}") from None
        end.record(stream)
        self._wait(end, prep)
        return self.cp.cuda.get_elapsed_time(start, end) / 1e3

    def _wait(self, event, prep: Prepared) -> None:
        """Host-side timeout: the device watchdog should stop a stuck kernel well before this."""
        deadline = time.monotonic() + 2 * self.watchdog_s + 10
        pause = 1e-5
        while not event.done:
            if time.monotonic() > deadline:
                raise DeadlockError(f"deadlock in {prep.ir.name!r}: the kernel did not finish within "
                                    f"{2 * self.watchdog_s + 10:.0f} s and the device watchdog did not stop it; the "
                                    "GPU context is unusable, restart the process")
            time.sleep(pause)
            pause = min(pause * 2, 1e-2)

    def stuck(self, prep: Prepared, arrays) -> tuple[str, tuple[str, ...]] | None:
        """The deadlock report when the device watchdog fired, else None."""
        if int(arrays["abort"].get()[0]) == 0:
            return None
        status = arrays["status"].get()
        lines = tuple(prep.program.describe_wait(b, int(status[b, 1]), int(status[b, 2]), int(status[b, 3]))
                      for b in range(prep.program.nblocks) if status[b, 0] == STATE_STUCK)
        reason = f"device watchdog: a wait exceeded {self.watchdog_s:g} s"
        return deadlock_message(prep.program, status, reason), lines

    def execute(self, prep: Prepared, *, warmup: int = 2, iters: int = 10) -> ExecutionResult:
        """Run a prepared program (even one the reference found broken, as long as it could be flattened:
        that is how the watchdog is exercised) and compare it with the reference."""
        if prep.flat is None:
            return _result(prep, False, prep.reference_message, prep.reference_failure, 0.0, (),
                           prep.reference_details)
        kernel = self.kernel(prep.dtype, prep.op)
        plan = self.plan(kernel, prep.flat.nblocks, prep.ir.name)
        arrays = self.device_arrays(prep)
        pristine = arrays["data"].copy()
        first = self.run_once(kernel, plan, prep, arrays, pristine)
        extras = (("blocks", str(prep.flat.nblocks)), ("threads", str(plan.threads)),
                  ("launch", "cooperative" if plan.cooperative else "normal (all blocks fit one wave)"),
                  ("reference", prep.reference_name), ("device", self.device_name))
        stuck = self.stuck(prep, arrays)
        if stuck is not None:
            message, lines = stuck
            return _result(prep, False, message, DEADLOCK, first, (), lines, extras)
        outputs = prep.outputs_of(arrays["data"].get())
        if prep.reference_name == "postcondition":
            return self._timed_postcondition(kernel, plan, prep, arrays, pristine, outputs, first, extras, warmup,
                                             iters)
        if not prep.runnable or len(prep.reference) != prep.flat.ngpus:
            return _result(prep, False, f"the GPU run finished but the {prep.reference_name} reference failed: "
                           f"{prep.reference_message}", prep.reference_failure or MISMATCH, first, outputs,
                           prep.reference_details, extras)
        diffs = compare_outputs(prep, outputs)
        seconds, extras = self._time(kernel, plan, prep, arrays, pristine, first, extras, warmup, iters)
        if diffs:
            return _result(prep, False, f"CUDA outputs differ from the {prep.reference_name} reference: {diffs[0]}",
                           MISMATCH, seconds, outputs, tuple(diffs), extras)
        if not prep.reference_passed:
            return _result(prep, False, f"CUDA matches the {prep.reference_name} reference bit for bit, which fails: "
                           f"{prep.reference_message}", prep.reference_failure or MISMATCH, seconds, outputs,
                           prep.reference_details, extras)
        return _result(prep, True, f"bit-identical to the {prep.reference_name} reference; {prep.reference_message}",
                       None, seconds, outputs, (), extras)


    def _time(self, kernel, plan: LaunchPlan, prep: Prepared, arrays, pristine, first: float,
              extras: tuple[tuple[str, str], ...], warmup: int, iters: int) -> tuple[float, tuple]:
        """Median kernel time over `iters` runs after `warmup`, and the timing extras."""
        times = [self.run_once(kernel, plan, prep, arrays, pristine) for _ in range(warmup + iters)][warmup:]
        seconds = statistics.median(times) if times else first
        moved, traffic = traffic_bytes(prep.program)
        return seconds, extras + (("kernel_us_median", f"{seconds * 1e6:.2f}"),
                                  ("kernel_us_min", f"{min(times or [first]) * 1e6:.2f}"),
                                  ("bytes_between_ranks", str(moved)), ("device_bytes_accessed", str(traffic)))

    def _timed_postcondition(self, kernel, plan: LaunchPlan, prep: Prepared, arrays, pristine,
                             outputs: tuple[np.ndarray, ...], first: float, extras: tuple[tuple[str, str], ...],
                             warmup: int, iters: int) -> ExecutionResult:
        """No reference run: check the outputs against the postcondition (exact for generated inputs)."""
        shaped = [out.reshape(prep.layout.output_chunks, -1) for out in outputs]
        passed, message = _postcondition(prep.collective, prep.dtype, prep.op, prep.inputs, shaped, exact=True)
        seconds, extras = self._time(kernel, plan, prep, arrays, pristine, first, extras, warmup, iters)
        return _result(prep, passed, f"postcondition: {message}", None if passed else MISMATCH, seconds, outputs,
                       (), extras)


def _result(prep: Prepared, passed: bool, message: str, failure: str | None, seconds: float,
            outputs: Sequence[np.ndarray], details: Sequence[str] = (),
            extras: tuple[tuple[str, str], ...] = ()) -> ExecutionResult:
    layout = prep.layout
    return ExecutionResult(
        passed=passed, message=message, collective=display_name(prep.collective.name), ngpus=prep.ir.ngpus,
        nbytes=layout.input_chunks * layout.chunk_elems * prep.dtype.itemsize, dtype=prep.dtype.name,
        backend="cuda", seconds=seconds, outputs=tuple(outputs), inputs=tuple(x.reshape(-1) for x in prep.inputs),
        failure=failure, details=tuple(details), chunk_elems=layout.chunk_elems,
        tiles=prep.flat.ntiles if prep.flat else layout.tiles,
        steps_run=int(prep.flat.steps.shape[0]) * prep.flat.ntiles if prep.flat and outputs else 0, extras=extras)


def execute_cuda(ir: Algo, backend: str = "cuda", nbytes: int | None = None, dtype: str = "float32", seed: int = 0,
                 collective: Collective | None = None, inputs: Sequence[np.ndarray] | None = None, *,
                 op: str = "sum", warmup: int = 2, iters: int = 10, watchdog_s: float = 5.0,
                 nslots: int = DEFAULT_NSLOTS, slot_bytes: int = DEFAULT_SLOT_BYTES, tile_bytes: int | None = None,
                 threads: int | None = None, root: int | None = None) -> ExecutionResult:
    """Run `ir` on the GPU: all ranks on one device, checked bit for bit against the reference, timed with CUDA
    events (median of `iters` runs after `warmup`). Same call as collsynth.runtime.execute(backend="cuda")."""
    if backend != "cuda":
        raise CudaBackendError(f"execute_cuda runs backend 'cuda', not {backend!r}")
    prep = prepare(ir, nbytes, dtype, seed, collective, inputs, op=op, nslots=nslots, slot_bytes=slot_bytes,
                   tile_bytes=tile_bytes, root=root)
    if not prep.runnable:  # the reference already shows the program is broken: no GPU needed to say so
        return _result(prep, False, f"{prep.reference_message} (found by the {prep.reference_name} reference)",
                       prep.reference_failure, 0.0, (), prep.reference_details)
    return CudaRunner(watchdog_s=watchdog_s, threads=threads).execute(prep, warmup=warmup, iters=iters)
