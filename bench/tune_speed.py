"""Tuner speed (issue 9: one size of one entry tuned in under 2 s CPU) and a record of what the tuner picks.

    nice .venv/bin/python bench/tune_speed.py                          # CPU s per DGX-1 entry at 1GB
    nice .venv/bin/python bench/tune_speed.py --dump picks.json        # and every pick, for --compare
    .venv/bin/python bench/tune_speed.py --compare before.json after.json

The entries are bench/quality.py's: the SMT Pareto points of DGX-1 AllGather / ReduceScatter (max 6 chunks)
and the library programs, each tuned alone (`tune_size(Evaluator(dgx1, [entry]), 1GB)`, default grid) in a
fresh evaluator; the time is the least CPU time (`time.process_time`: the machine is shared) of `--repeat`
runs. `--algorithms DIR` reads the synthesized points from DIR (written there by the first run), so that two
versions of the code are timed on the same inputs.

`--dump` also records, for bench/quality.py's 10 tuner-vs-exhaustive cases, every entry at 1KB, 1MB, 16MB
and 1GB, and the catalog's sweep of every entry (`tune_sizes`, 1KB..1GB, the catalog's grid and descent):
the pick, its time, the evaluations and the whole trace (every configuration timed, in order, with its
time), plus the exhaustive search of the 10 cases. `--compare` says whether two dumps agree exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from collsynth.collectives import make_collective
from collsynth.schedule.algorithm import Algorithm
from collsynth.synth.pareto import pareto_frontier
from collsynth.topologies import Topology, resolve_topology
from collsynth.tune import Candidate, Evaluator, exhaustive_size, tune_size, tune_sizes
from collsynth.tune.candidates import algorithm_candidate, library_candidates
from collsynth.tune.entry import CATALOG_DESCENTS, CATALOG_GRID
from collsynth.tune.search import SizeResult

KB, MB, GB = 1 << 10, 1 << 20, 1 << 30
SWEEP = [1 << k for k in range(10, 31, 2)]  # 1KB .. 1GB, x4
CASES = (("dgx1", "allgather", (KB, MB, 16 * MB)), ("dgx1", "reducescatter", (KB, MB, 16 * MB)),
         ("dgx1", "gather", (KB, 16 * MB)), ("ring:8", "allgather", (KB, 16 * MB)))  # bench/quality.py's


def candidates(topo: Topology, coll: str, folder: Path | None) -> list[Candidate]:
    """The frontier points (synthesized, or read from `folder` when it has them) and the library programs."""
    stem = f"{topo.name.replace(':', '')}_{coll}_"
    saved = sorted(folder.glob(f"{stem}*.json")) if folder is not None else []
    if saved:
        algorithms = [Algorithm.load(path) for path in saved]
    else:
        front = pareto_frontier(topo, make_collective(coll, topo.num_ranks, 1), max_chunks=6, time_limit=60)
        algorithms = [p.algorithm for p in front.frontier if p.algorithm is not None]
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            for i, algorithm in enumerate(algorithms):
                (folder / f"{stem}{i}.json").write_text(algorithm.to_json())
    return [algorithm_candidate(a, topo, coll) for a in algorithms] + library_candidates(topo, coll)


def record(result: SizeResult) -> dict[str, Any]:
    """The pick, its exact time (repr: every bit), the evaluations and the trace."""
    return {"size": result.size, "best": result.best.label() if result.best else None,
            "time_us": repr(result.timing.time_us), "busbw": repr(result.timing.busbw_GBps),
            "evaluations": result.evaluations, "stopped": getattr(result, "stopped", 0),
            "trace": [[c.label(), repr(t)] for c, t in result.trace]}


def time_entries(folder: Path | None, repeat: int) -> list[tuple[str, float, dict[str, Any]]]:
    dgx1 = resolve_topology("dgx1")
    rows = []
    for coll in ("allgather", "reducescatter"):
        for cand in candidates(dgx1, coll, folder):
            best, rec = float("inf"), {}
            for _ in range(repeat):
                cpu = time.process_time()
                result = tune_size(Evaluator(dgx1, [cand]), GB)
                best = min(best, time.process_time() - cpu)
                rec = record(result)
            rows.append((f"{coll} {cand.name}", best, rec))
            print(f"{coll:14s} {cand.name:40s} {best:6.2f} s  {rec['best']}  {float(rec['time_us']):.2f} us  "
                  f"{rec['evaluations']} evaluations", flush=True)
    return rows


def dump(folder: Path | None, entries: list[tuple[str, float, dict[str, Any]]]) -> dict[str, Any]:
    out: dict[str, Any] = {"entries_1GB": {name: rec for name, _, rec in entries}, "cases": {}, "exhaustive": {},
                           "entry_sizes": {}, "catalog_sweep": {}}
    for tname, coll, sizes in CASES:
        topo = resolve_topology(tname)
        cands = candidates(topo, coll, folder)
        tuned, full = Evaluator(topo, cands), Evaluator(topo, cands)
        for size in sizes:
            key = f"{tname} {coll} {size}"
            out["cases"][key] = record(tune_size(tuned, size))
            out["exhaustive"][key] = record(exhaustive_size(full, size))
            print(key, out["cases"][key]["best"], out["cases"][key]["evaluations"], flush=True)
        for cand in cands:
            for size in (KB, MB, 16 * MB, GB):
                out["entry_sizes"][f"{tname} {coll} {cand.name} {size}"] = record(
                    tune_size(Evaluator(topo, [cand]), size))
            run = tune_sizes(Evaluator(topo, [cand]), coll, SWEEP, CATALOG_GRID, descents=CATALOG_DESCENTS)
            out["catalog_sweep"][f"{tname} {coll} {cand.name}"] = [record(r) for r in run.results]
    return out


def records(dumped: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every record of a dump by section and key (a catalog sweep: one record per size)."""
    out = {}
    for section, entries in dumped.items():
        for key, value in entries.items():
            for rec in value if isinstance(value, list) else [value]:
                out[f"{section} {key} {rec['size']}"] = rec
    return out


def compare(a: dict[str, Any], b: dict[str, Any]) -> int:
    """Print every pick (configuration, time, busbw) that differs; the number that differ. A trace may lose
    configurations (B's simulations stopped once they could not win) but must otherwise be A's."""
    left, right = records(a), records(b)
    picks = paths = 0
    for key in sorted(set(left) | set(right)):
        x, y = left.get(key), right.get(key)
        if x is None or y is None or (x["best"], x["time_us"], x["busbw"]) != (y["best"], y["time_us"], y["busbw"]):
            picks += 1
            print(f"PICK DIFFERS {key}")
            continue
        rest = iter(map(tuple, x["trace"]))
        if not all(entry in rest for entry in map(tuple, y["trace"])):  # y's trace: a subsequence of x's
            paths += 1
            print(f"PATH DIFFERS {key}")
    shorter = sum(1 for key in left if key in right and len(right[key]["trace"]) < len(left[key]["trace"]))
    spent = [sum(len(r["trace"]) for r in side.values()) for side in (left, right)]
    print(f"{len(left)} records compared: {picks} picks differ, {paths} paths differ; {shorter} traces shorter in "
          f"B (evaluations {spent[0]} -> {spent[1]}, exhaustive searches included)")
    return picks + paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", type=Path, help="folder of the synthesized points (read, or written once)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per entry; the least CPU time is shown")
    parser.add_argument("--dump", type=Path, help="write every pick and trace to this JSON file")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two dumps and exit")
    args = parser.parse_args()
    if args.compare:
        sides = []
        for path in args.compare:
            if not path.is_file():
                print(f"error: {path} does not exist; give two files written by --dump", file=sys.stderr)
                raise SystemExit(2)
            sides.append(json.loads(path.read_text()))
        raise SystemExit(1 if compare(*sides) else 0)
    if args.repeat < 1:
        print("error: --repeat must be >= 1; give e.g. --repeat 3", file=sys.stderr)
        raise SystemExit(2)
    entries = time_entries(args.algorithms, args.repeat)
    print(f"slowest entry: {max(cpu for _, cpu, _ in entries):.2f} CPU s (target < 2 s)")
    if args.dump:
        args.dump.write_text(json.dumps(dump(args.algorithms, entries), indent=1))


if __name__ == "__main__":
    main()
