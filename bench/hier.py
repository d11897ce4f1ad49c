"""Hierarchical composition vs the library's multi-node programs, simulated per size (issue 10).

    nice .venv/bin/python bench/hier.py [--topology 16xndv4 --topology 64xh100_nvswitch]
                                        [--collective allreduce --collective alltoall] [--sources ring,oneshot]

For each (topology, collective): every candidate of `collsynth.synth.cluster.hierarchical` with the given
phase sources, lowered with `lower_composition` (`lower_to_program` with a link's contiguous transfers
coalesced into one op; `--lowering per-chunk` adds `lower_to_program` as it is), in place for AllReduce as
the library's `inplace=True` form, in each --merge mode, compiled with the default options and with
instruction fusion and threadblock pairing off (two knobs `collsynth tune` searches); and the library's
multi-node programs (`hierarchical_allreduce`, `two_step_alltoall`, `three_step_alltoall`). Both sides are
compiled for `--target`'s runtime (split to its loader limits; `none`: no limits) and simulated at
1 KB..1 GB (x4) under the Simple, LL128 and LL protocols. A side's time at a size is its best
(candidate x merge x protocol); the table prints both sides, the ratio and the winning candidate.
Simulated times are exact (the simulator's model); the seconds columns are wall-clock and depend on load.
"""

from __future__ import annotations

import argparse
import itertools
import math
import time
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

SIZES = [1 << (10 + 2 * i) for i in range(11)]  # 1 KB .. 1 GB
PROTOCOLS = ("Simple", "LL128", "LL")
LIBRARY = {"allreduce": ("hierarchical_allreduce",), "alltoall": ("two_step_alltoall", "three_step_alltoall"),
           "allgather": (), "reducescatter": ()}


def _times(ir: Any, topo: Any) -> list[tuple[float, str]]:
    from collsynth.sim.simulate import simulate

    best = [(math.inf, "")] * len(SIZES)
    for proto in PROTOCOLS:
        rows = simulate(replace(ir, proto=proto), topo, SIZES).rows
        best = [min(b, (r.time_us, proto)) for b, r in zip(best, rows, strict=True)]
    return best


def _side(named_irs: list[tuple[str, Any]], topo: Any, failures: list[str]) -> list[tuple[float, str]]:
    from collsynth.core.errors import CollsynthError

    best = [(math.inf, "")] * len(SIZES)
    for name, ir in named_irs:
        try:
            times = _times(ir, topo)
        except CollsynthError as exc:  # e.g. a compiled IR the simulator finds deadlocked: reported, not timed
            failures.append(f"{name}: {str(exc)[:160]}")
            continue
        for i, (t, proto) in enumerate(times):
            if t < best[i][0]:
                best[i] = (t, f"{name} {proto}")
    return best


def compare(topology: str, collective: str, merges: tuple[str, ...], sources: list[str] | None,
            target: str, lowering_modes: tuple[str, ...] = ("coalesced",)) -> dict[str, Any]:
    from collsynth.algorithms.hier_lower import lower_composition
    from collsynth.algorithms.registry import build
    from collsynth.collectives import make_collective
    from collsynth.compiler.pipeline import compile_program
    from collsynth.core.errors import CollsynthError
    from collsynth.language.lower import lower_to_program
    from collsynth.synth.cluster.hierarchical import hierarchical
    from collsynth.topologies import resolve_topology

    topo = resolve_topology(topology)
    began = time.perf_counter()
    result = hierarchical(topo, make_collective(collective, topo.num_ranks, 1), 1 << 20, sources=sources)
    inplace = collective == "allreduce"
    synth_s = time.perf_counter() - began
    began = time.perf_counter()
    # compile options the tuner searches (tune.space: fusion, pair_threadblocks): default, and both off
    options: tuple[dict[str, Any], ...] = ({}, {"instr_fusion": False, "pair_threadblocks": False})
    failures: list[str] = []
    ours = []
    lowerings = {"coalesced": lower_composition, "per-chunk": lower_to_program}
    for a, merge, lowering, opts in itertools.product(result.algorithms, merges, lowering_modes, options):
        name = (f"{a.provenance['plan']}/{a.provenance['node_source']}/{a.provenance['rail_source']}/{merge}"
                f"{'/per-chunk' if lowering == 'per-chunk' else ''}{'/unfused' if opts else ''}")
        try:
            program = lowerings[lowering](a, merge=merge, inplace=inplace)
            ours.append((name, compile_program(program, target, **opts)))
        except CollsynthError as exc:  # e.g. more threadblocks per channel than MSCCL runs
            failures.append(f"{name}: {str(exc)[:160]}")
    extra = {"inplace": True} if inplace else {}
    lib = [(name, compile_program(build(name, topo, num_nodes=topo.num_machines, **extra), target))
           for name in LIBRARY[collective]]
    compile_s = time.perf_counter() - began
    began = time.perf_counter()
    mine, theirs = _side(ours, topo, failures), _side(lib, topo, failures)
    return {"topology": topology, "collective": collective, "ours": mine, "library": theirs, "synth_s": synth_s,
            "compile_s": compile_s, "sim_s": time.perf_counter() - began, "candidates": len(result.algorithms),
            "failures": failures}


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def table(row: dict[str, Any]) -> Table:
    out = Table(title=f"{row['collective']} on {row['topology']}: hierarchical ({row['candidates']} candidates) vs "
                      f"library (synth {row['synth_s']:.1f} s, compile {row['compile_s']:.1f} s, "
                      f"simulate {row['sim_s']:.1f} s wall)")
    for column in ("size", "hier us", "library us", "hier/library", "hier winner", "library winner"):
        out.add_column(column)
    for size, (t, who), (u, lib) in zip(SIZES, row["ours"], row["library"], strict=True):
        out.add_row(_size(size), f"{t:.1f}", f"{u:.1f}", f"{t / u:.3f}" if u else "-", who, lib)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", action="append", default=None)
    parser.add_argument("--collective", action="append", default=None)
    parser.add_argument("--merge", action="append", default=None, help="lowering merge modes (contiguous, stage)")
    parser.add_argument("--sources", default=None, help="phase sources, comma-separated (default: hierarchical's)")
    parser.add_argument("--target", default="msccl-executor", help="runtime both sides are compiled for")
    parser.add_argument("--lowering", action="append", choices=("coalesced", "per-chunk"), default=None,
                        help="how compositions are lowered (default coalesced; give both to compare)")
    args = parser.parse_args()
    console = Console()
    for topology in args.topology or ["16xndv4", "64xh100_nvswitch"]:
        for collective in args.collective or ["allreduce", "alltoall"]:
            sources = args.sources.split(",") if args.sources else None
            row = compare(topology, collective, tuple(args.merge or ("contiguous",)), sources, args.target,
                          tuple(args.lowering or ("coalesced",)))
            console.print(table(row))
            for failure in row["failures"]:
                console.print(f"not timed: {failure}", soft_wrap=True)


if __name__ == "__main__":
    main()
