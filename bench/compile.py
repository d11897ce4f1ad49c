"""Compiler benchmark: DSL tracing + compile_program time and peak memory per program size.

    .venv/bin/python bench/compile.py                 # the full table (rings 8..128, all-pairs 8..64)
    .venv/bin/python bench/compile.py --quick         # rings 8..32, all-pairs 8..16
    .venv/bin/python bench/compile.py --no-memory     # times only (tracemalloc slows Python down)
    .venv/bin/python bench/compile.py --repeat 1      # one timed run per size (default: best of 3)

Programs (written here, MSCCLang-style, against the native DSL):
- ring AllReduce: MSCCLang's allreduce_a100_ring shape (AllReduce(n, n, inplace), one ring of
  reduce-then-copy steps, manual threadblocks, 1 channel): 2n(n-1) chunk ops.
- chunk-major ring AllReduce: the same ring written the way most MSCCLang programs are (for each chunk,
  for each hop), automatic threadblocks: the compiler must find the pipelined order itself (its
  connections are re-queued by priority, not program order) and fuse every hop to stay within 256
  steps per threadblock at 128 ranks.
- all-pairs AllReduce: MSCCLang's allreduce_a100_allpairs shape (AllReduce(n, n*n), every rank
  gathers its n-chunk share from every peer into scratch, reduces it chunk by chunk, sends the sums
  back): n(n-1) transfers of n chunks + n*n*(n-1) local single-chunk reductions. Automatic
  threadblocks, so the compiler may aggregate the per-chunk reductions (with MSCCLang's per-chunk
  threadblock hints the 64-rank program exceeds the MSCCL loader's 4096 elements per GPU).
Time: wall clock of building the Program (DSL) and of compile_program (IR checked, not emitted), the
best of --repeat runs (the machine is shared). Memory: tracemalloc peak of the same two phases, in a
separate run.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from collsynth.collectives import make_collective
from collsynth.compiler import compile_program
from collsynth.language import Buffer, Program, ProgramBuilder
from collsynth.topologies import fully_connected

# MSCCLang's published compile times for reference (seconds), from the task brief.
MSCCLANG_SECONDS = {("ring", 128): "72-93", ("all-pairs", 16): "11", ("all-pairs", 32): ">600"}
TARGET_SECONDS = {("ring", 128): 2.0, ("ring (chunk-major)", 128): 2.0, ("all-pairs", 32): 5.0,
                  ("all-pairs", 64): 30.0}


def ring_allreduce(n: int) -> Program:
    b = ProgramBuilder(f"ring_allreduce_{n}", fully_connected(n), make_collective("allreduce", n, 1, inplace=True),
                       threadblock_policy="manual")
    for step in range(n - 1):  # reduce-scatter: chunk c travels from rank c+1 around the ring
        for c in range(n):
            here, nxt = (c + step) % n, (c + step + 1) % n
            b.chunk(nxt, Buffer.input, c).reduce(b.chunk(here, Buffer.input, c), sendtb=0, recvtb=0, ch=0)
    for step in range(-1, n - 2):  # allgather: the owner's sum travels on around the ring
        for c in range(n):
            here, nxt = (c + step) % n, (c + step + 1) % n
            b.chunk(here, Buffer.input, c).copy(nxt, Buffer.input, c, sendtb=0, recvtb=0, ch=0)
    return b.build()


def chunk_major_ring_allreduce(n: int) -> Program:
    b = ProgramBuilder(f"chunk_major_ring_allreduce_{n}", fully_connected(n),
                       make_collective("allreduce", n, 1, inplace=True))
    for c in range(n):  # chunk c is reduced around the ring onto rank c-1, then passed on around it
        acc = b.chunk(c, Buffer.input, c)
        for hop in range(1, n):
            acc = b.chunk((c + hop) % n, Buffer.input, c).reduce(acc)
        for hop in range(1, n):
            acc = acc.copy((c + n - 1 + hop) % n, Buffer.input, c)
    return b.build()


def allpairs_allreduce(n: int) -> Program:
    b = ProgramBuilder(f"allpairs_allreduce_{n}", fully_connected(n), make_collective("allreduce", n, n, inplace=True))
    for owner in range(n):  # every peer sends the owner's share to the owner's scratch
        for peer in range(n):
            if peer != owner:
                b.chunk(peer, Buffer.input, owner * n, n).copy(owner, "gathered")
    for owner in range(n):  # the owner adds them chunk by chunk
        for k in range(n * (n - 1)):
            b.chunk(owner, Buffer.input, owner * n + k % n).reduce(b.chunk(owner, "gathered", k))
    for owner in range(n):  # and sends its sums to every peer
        for peer in range(n):
            if peer != owner:
                b.chunk(owner, Buffer.input, owner * n, n).copy(peer, Buffer.input, owner * n)
    return b.build()


PROGRAMS: dict[str, Callable[[int], Program]] = {
    "ring": ring_allreduce, "ring (chunk-major)": chunk_major_ring_allreduce, "all-pairs": allpairs_allreduce}


def measure(build: Callable[[int], Program], n: int, memory: bool, repeat: int) -> dict[str, float]:
    row: dict[str, float] = {}
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        program = build(n)
        t1 = time.perf_counter()
        ir = compile_program(program)
        t2 = time.perf_counter()
        if not row or t2 - t0 < row["build"] + row["compile"]:
            row = {"ops": len(program.ops), "steps": ir.num_steps, "build": t1 - t0, "compile": t2 - t1,
                   "per_tb": max(len(tb.steps) for gpu in ir.gpus for tb in gpu.tbs)}
        del program, ir
    if memory:
        gc.collect()
        tracemalloc.start()
        program = build(n)
        _, build_peak = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        compile_program(program)
        _, compile_peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        row["build_mb"] = build_peak / 2**20
        row["peak_mb"] = max(build_peak, compile_peak) / 2**20
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes only")
    parser.add_argument("--no-memory", action="store_true", help="skip the tracemalloc run")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per size; the best is shown")
    args = parser.parse_args()
    rings = [8, 16, 32] if args.quick else [8, 16, 32, 64, 128]
    sizes = {"ring": rings, "ring (chunk-major)": rings, "all-pairs": [8, 16] if args.quick else [8, 16, 32, 64]}
    table = Table(title="Compiler: DSL trace + compile_program (bench/compile.py)", title_justify="left")
    for column in ("program", "ranks", "chunk ops", "IR steps", "max steps/tb", "build s", "compile s", "total s",
                   "target s", "MSCCLang s", "peak MB"):
        table.add_column(column, justify="left" if column == "program" else "right")
    console = Console(width=150)
    for name, build in PROGRAMS.items():
        for n in sizes[name]:
            row = measure(build, n, not args.no_memory, max(args.repeat, 1))
            total = row["build"] + row["compile"]
            target = TARGET_SECONDS.get((name, n))
            table.add_row(name, str(n), str(row["ops"]), str(row["steps"]), str(row["per_tb"]), f"{row['build']:.2f}",
                          f"{row['compile']:.2f}", f"{total:.2f}", f"< {target:g}" if target else "",
                          MSCCLANG_SECONDS.get((name, n), ""), f"{row['peak_mb']:.0f}" if "peak_mb" in row else "-")
    console.print(table)


if __name__ == "__main__":
    main()
