"""Wall time of SCCL-style Pareto frontiers (collsynth synth pareto), against the SCCL reference.

    .venv/bin/python bench/sccl.py                 # every frontier, one run each
    .venv/bin/python bench/sccl.py --only dgx1     # frontiers whose name contains "dgx1"
    .venv/bin/python bench/sccl.py --repeat 3      # best of 3
    .venv/bin/python bench/sccl.py --jobs 2        # chunk counts in 2 processes

Reference: msccl-tools' SCCL (z3 5.4) on the same class of 2-core machine (figures from the project's
spec); ">600" means it did not finish in 10 minutes. Target: 3x faster, and the unfinished ones finished.
Times include the lower bounds (LP) and verifying every algorithm, not the Python start-up.
"""

from __future__ import annotations

import argparse
import os
import time

from rich.console import Console
from rich.table import Table

from collsynth.collectives import make_collective
from collsynth.synth.pareto import pareto_frontier
from collsynth.topologies import resolve_topology

UNFINISHED = "unfinished"  # SCCL did not finish in 10 minutes
# (topology, collective, SCCL seconds, UNFINISHED, or None when there is no reference figure)
FRONTIERS: list[tuple[str, str, float | str | None]] = [
    ("dgx1", "allgather", 21.0),
    ("dgx1", "reducescatter", 32.0),
    ("dgx1", "gather", 16.0),
    ("ring:16", "allgather", 5.5),
    ("fully_connected:16", "allgather", 128.0),
    ("dgx1", "alltoall", UNFINISHED),
    ("dgx1", "broadcast", UNFINISHED),
    ("dgx1", "scatter", UNFINISHED),
    ("dgx2", "allgather", UNFINISHED),
    ("ring:8", "allgather", None),
    ("fully_connected:8", "alltoall", None),
    ("dgx1", "allreduce", None),  # SCCL crashes on AllReduce
]
SCCL_UNFINISHED_S = 600.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run the frontiers whose 'topology collective' contains this")
    parser.add_argument("--repeat", type=int, default=1, help="runs per frontier; the best is reported")
    parser.add_argument("--jobs", type=int, default=1, help="parallel processes per sweep")
    parser.add_argument("--max-chunks", type=int, default=8)
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per solver call")
    args = parser.parse_args()
    console = Console(width=200)
    table = Table(title=f"SCCL-style Pareto frontiers (jobs={args.jobs}, best of {args.repeat}, "
                        f"load avg {os.getloadavg()[0]:.1f} at start)")
    for column in ("frontier", "Pareto points (C,S,R)", "bounds S, R/C", "stopped", "calls", "wall s", "SCCL s",
                   "speed-up", "3x target"):
        table.add_column(column, justify="right" if column in ("calls", "wall s", "SCCL s", "speed-up") else "left")
    for topo_name, coll_name, sccl in FRONTIERS:
        label = f"{topo_name} {coll_name}"
        if args.only not in label:
            continue
        topology = resolve_topology(topo_name)
        collective = make_collective(coll_name, topology.num_ranks)
        best, result = float("inf"), None
        for _ in range(args.repeat):
            start = time.perf_counter()
            result = pareto_frontier(topology, collective, max_chunks=args.max_chunks, time_limit=args.time_limit,
                                     jobs=args.jobs)
            best = min(best, time.perf_counter() - start)
        assert result is not None
        bound_met = result.stopped == "bandwidth bound met"
        if isinstance(sccl, float):
            reference, speedup, met = f"{sccl:.1f}", f"{sccl / best:.0f}x", "yes" if sccl / best >= 3 else "no"
        elif sccl == UNFINISHED:
            reference, speedup = ">600", f">{SCCL_UNFINISHED_S / best:.0f}x"
            met = "yes" if bound_met else "finished (bound unreachable)" if coll_name == "broadcast" else "no"
        else:
            reference, speedup, met = "-", "-", "-"
        points = " ".join(f"({p.chunks},{p.steps},{p.rounds})" for p in result.frontier)
        timeouts = sum(1 for a in result.tried if a.result == "timeout")
        table.add_row(label, points, f"{result.steps_bound}, {result.bound}",
                      result.stopped, f"{len(result.tried)}" + (f" ({timeouts} t/o)" if timeouts else ""),
                      f"{best:.1f}", reference, speedup, met)
        console.print(f"done: {label} in {best:.1f} s", style="dim")
    console.print(table)


if __name__ == "__main__":
    main()
