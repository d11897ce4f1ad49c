"""Hierarchical composition vs the library's multi-node programs, simulated per size (issue 10).

    nice .venv/bin/python bench/hier.py [--topology 16xndv4 --topology 64xh100_nvswitch]
                                        [--collective allreduce --collective alltoall] [--sources ring,oneshot]
                                        [--merge contiguous --merge stage --merge transpose-sender]
                                        [--plans gateway,node-rail]

For each (topology, collective): every candidate of `collsynth.synth.cluster.hierarchical` with the given phase
sources (`--plans`: only these plans), lowered with `lower_composition` (`lower_to_program` with a link's
contiguous transfers coalesced into one op; `--lowering per-chunk` adds `lower_to_program` as it is), in place for
AllReduce as the library's `inplace=True` form, in each --merge mode (`transpose-sender` / `transpose-receiver`:
the gateway composition through `lower_gateway`, one message per GPU and node pair; other plans skip them),
compiled with the default options and with instruction fusion and threadblock pairing off (two knobs `collsynth
tune` searches); and the library's multi-node programs (`hierarchical_allreduce`, `two_step_alltoall`,
`three_step_alltoall`), with the same option sets. Both sides are compiled for `--target`'s runtime (split to its
loader limits; `none`: no limits) and simulated at 1 KB..1 GB (x4) under the Simple, LL128 and LL protocols. A
side's time at a size is its best (candidate x merge x options x protocol); the table prints both sides, the ratio
and the winning candidate. A candidate is simulated size by size with `stop_at` = its side's best so far at that
size: a run proved slower stops early, which changes no side's best. Simulated times are exact (the simulator's
model); the stage costs are CPU seconds (`time.process_time`), which the machine's load inflates less than wall
time.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from rich.console import Console
from rich.table import Table

Progress = Callable[[str], None]  # told each finished stage of a long run (a line)


def _quiet(line: str) -> None:
    """A Progress that tells no one."""
SIZES = [1 << (10 + 2 * i) for i in range(11)]  # 1 KB .. 1 GB
PROTOCOLS = ("Simple", "LL128", "LL")
LIBRARY = {"allreduce": ("hierarchical_allreduce",), "alltoall": ("three_step_alltoall", "two_step_alltoall"),
           "allgather": (), "reducescatter": ()}


def _improve(best: list[tuple[float, str]], name: str, ir: Any, topo: Any) -> None:
    """Lower `best` (per size: time, winner) where `ir` under some protocol beats it; a run proved not to
    beat the best at its size is stopped (engine.NotFaster)."""
    from collsynth.sim import engine
    from collsynth.sim.simulate import simulate

    for proto in PROTOCOLS:
        timed = replace(ir, proto=proto)
        planned = engine.plan(timed, topo)
        for i, size in enumerate(SIZES):
            try:
                t = simulate(timed, topo, [size], planned=planned, stop_at=best[i][0]).rows[0].time_us
            except engine.NotFaster:
                continue
            if t < best[i][0]:
                best[i] = (t, f"{name} {proto}")


def _side(named_irs: list[tuple[str, Any]], topo: Any, failures: list[str],
          progress: Progress = _quiet) -> list[tuple[float, str]]:
    from collsynth.core.errors import CollsynthError

    best = [(math.inf, "")] * len(SIZES)
    for name, ir in named_irs:
        began = time.process_time()
        try:
            _improve(best, name, ir, topo)
        except CollsynthError as exc:  # e.g. a compiled IR the simulator finds deadlocked: reported, not timed
            failures.append(f"{name}: {str(exc)[:160]}")
        wins = [_size(size) for size, (_, who) in zip(SIZES, best, strict=True) if who.startswith(f"{name} ")]
        progress(f"simulated {name} ({time.process_time() - began:.1f} s CPU): best at "
                 f"{', '.join(wins) or 'no size'}")
    return best


def _lower(algorithm: Any, merge: str, lowering: str, inplace: bool) -> Any:
    """The program of one candidate: `lower_gateway` for the transpose modes (gateway only; None for the
    other plans), `lower_rail_gather` for `gather` (node-rail of direct phases only; None for the others),
    else `lower_composition` or `lower_to_program`."""
    from collsynth.algorithms.hier_lower import (
        RAIL_GATHER_SOURCES,
        lower_composition,
        lower_gateway,
        lower_rail_gather,
    )
    from collsynth.language.lower import lower_to_program

    if merge == "gather":  # node-rail AllToAll of direct phases only: one rail message per GPU and remote node
        provenance = algorithm.provenance
        if (provenance["plan"] != "node-rail" or lowering != "coalesced"
                or any(provenance.get(k) != v for k, v in RAIL_GATHER_SOURCES.items())):
            return None
        return lower_rail_gather(algorithm)
    if merge.startswith("transpose-"):
        if algorithm.provenance["plan"] != "gateway" or lowering != "coalesced":
            return None
        return lower_gateway(algorithm, transpose=merge.removeprefix("transpose-"))
    lower = lower_composition if lowering == "coalesced" else lower_to_program
    return lower(algorithm, merge=merge, inplace=inplace)


def compare(topology: str, collective: str, merges: tuple[str, ...], sources: list[str] | None,
            target: str, lowering_modes: tuple[str, ...] = ("coalesced",),
            plans: tuple[str, ...] | None = None, sides: tuple[str, ...] = ("ours", "library"),
            option_sets: tuple[str, ...] = ("default", "unfused"),
            library: tuple[str, ...] | None = None, progress: Progress = _quiet) -> dict[str, Any]:
    from collsynth.algorithms.registry import build
    from collsynth.collectives import make_collective
    from collsynth.compiler.pipeline import compile_program
    from collsynth.core.errors import CollsynthError
    from collsynth.synth.cluster.hierarchical import hierarchical
    from collsynth.topologies import resolve_topology

    topo = resolve_topology(topology)
    began = time.process_time()
    algorithms = []
    if "ours" in sides:
        result = hierarchical(topo, make_collective(collective, topo.num_ranks, 1), 1 << 20, sources=sources)
        algorithms = [a for a in result.algorithms if plans is None or a.provenance["plan"] in plans
                      or f"{a.provenance['plan']}-{a.provenance['rail_source']}" in plans]
        progress(f"synthesized {len(algorithms)} candidates ({time.process_time() - began:.1f} s CPU)")
    inplace = collective == "allreduce"
    synth_s = time.process_time() - began
    began = time.process_time()
    # compile options the tuner searches (tune.space: fusion, pair_threadblocks): default, and both off
    knobs: dict[str, dict[str, Any]] = {"default": {}, "unfused": {"instr_fusion": False, "pair_threadblocks": False}}
    options = tuple(knobs[name] for name in option_sets)
    failures: list[str] = []
    ours = []
    for a, merge, lowering, opts in itertools.product(algorithms, merges, lowering_modes, options):
        name = (f"{a.provenance['plan']}/{a.provenance['node_source']}/{a.provenance['rail_source']}/{merge}"
                f"{'/per-chunk' if lowering == 'per-chunk' else ''}{'/unfused' if opts else ''}")
        try:
            program = _lower(a, merge, lowering, inplace)
            if program is None:
                continue
            ours.append((name, compile_program(program, target, **opts)))
            progress(f"compiled {name} ({time.process_time() - began:.1f} s CPU so far)")
        except CollsynthError as exc:  # e.g. more threadblocks per channel than MSCCL runs
            failures.append(f"{name}: {str(exc)[:160]}")
            progress(f"not compiled {name}: {str(exc)[:160]}")
    extra = {"inplace": True} if inplace else {}
    lib = []  # compiled with the same option sets as the compositions: both sides get the same search
    for name in LIBRARY[collective]:
        if "library" not in sides or (library is not None and name not in library):
            continue
        program = build(name, topo, num_nodes=topo.num_machines, **extra)
        for opts in options:
            label = f"{name}{'/unfused' if opts else ''}"
            try:
                lib.append((label, compile_program(program, target, **opts)))
            except CollsynthError as exc:
                failures.append(f"{label}: {str(exc)[:160]}")
            progress(f"compiled {label} ({time.process_time() - began:.1f} s CPU so far)")
    compile_s = time.process_time() - began
    began = time.process_time()
    mine, theirs = _side(ours, topo, failures, progress), _side(lib, topo, failures, progress)
    return {"topology": topology, "collective": collective, "ours": mine, "library": theirs, "synth_s": synth_s,
            "compile_s": compile_s, "sim_s": time.process_time() - began, "candidates": len(algorithms),
            "failures": failures}


def _size(nbytes: int) -> str:
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def table(row: dict[str, Any]) -> Table:
    out = Table(title=f"{row['collective']} on {row['topology']}: hierarchical ({row['candidates']} candidates) vs "
                      f"library (synth {row['synth_s']:.1f} s, compile {row['compile_s']:.1f} s, "
                      f"simulate {row['sim_s']:.1f} s CPU)")
    for column in ("size", "hier us", "library us", "hier/library", "hier winner", "library winner"):
        out.add_column(column)
    for size, (t, who), (u, lib) in zip(SIZES, row["ours"], row["library"], strict=True):
        ratio = f"{t / u:.3f}" if u and math.isfinite(t * u) else "-"
        out.add_row(_size(size), f"{t:.1f}", f"{u:.1f}", ratio, who, lib)
    return out


def _say(console: Console, what: str, line: str) -> None:
    console.print(f"[dim]{what}: {line}[/dim]", soft_wrap=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", action="append", default=None)
    parser.add_argument("--collective", action="append", default=None)
    parser.add_argument("--merge", action="append", default=None,
                        help="lowering merge modes (contiguous, stage, transpose-sender, transpose-receiver, gather)")
    parser.add_argument("--side", action="append", choices=("ours", "library"), default=None,
                        help="time only this side (two runs can then share the machine's cores)")
    parser.add_argument("--library", action="append", default=None, help="only these library programs")
    parser.add_argument("--options", default="default,unfused",
                        help="compositions' compile option sets, comma-separated (default, unfused)")
    parser.add_argument("--plans", default=None,
                        help="plans to time, comma-separated: PLAN or PLAN-RAILSOURCE (gateway-rail)")
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
                          tuple(args.lowering or ("coalesced",)),
                          tuple(args.plans.split(",")) if args.plans else None,
                          tuple(args.side or ("ours", "library")), tuple(args.options.split(",")),
                          tuple(args.library) if args.library else None,
                          functools.partial(_say, console, f"{topology} {collective}"))
            console.print(table(row))
            for failure in row["failures"]:
                console.print(f"not timed: {failure}", soft_wrap=True)


if __name__ == "__main__":
    main()
