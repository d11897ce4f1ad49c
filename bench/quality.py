"""Quality of compiled + tuned synthesized algorithms against their model, the bound and the library (issue 9).

    nice .venv/bin/python bench/quality.py [--quick]

Everything is synthesized here (SMT Pareto frontiers, MILP schedules), lowered, compiled, tuned (collsynth.tune:
exhaustive over algorithm x protocol, coordinate descent over the resources) and timed by the simulator.
Every configuration that a table reports as best is run once through the reference interpreter.
Tables: (1) DGX-1 AllGather / ReduceScatter, best tuned synthesized vs the bound and vs the best tuned
hand-written program at 11 sizes; (2) every Pareto point vs its own model cost; (3) DGX-1 AllReduce wins;
(4) MILP schedules vs their predicted time; (5) the tuner vs exhaustive search of the same grid.
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Sequence
from fractions import Fraction

from rich.console import Console
from rich.table import Table

from collsynth.collectives import make_collective
from collsynth.core.units import format_size
from collsynth.runtime import execute
from collsynth.schedule import SynthesisResult
from collsynth.synth.pareto import pareto_frontier
from collsynth.synth.report import cost_model
from collsynth.topologies import Topology, resolve_topology
from collsynth.tune import Candidate, Evaluator, Grid, exhaustive_size, tune_size
from collsynth.tune.candidates import algorithm_candidate, library_candidates
from collsynth.tune.evaluate import Timing

SIZES = [1 << k for k in range(10, 31, 2)]  # 1KB .. 1GB, x4: 11 sizes
KB, GB = 1 << 10, 1 << 30
MB = 1 << 20
console = Console(width=160)


def frontier(topo: Topology, coll: str) -> SynthesisResult:
    return pareto_frontier(topo, make_collective(coll, topo.num_ranks, 1), max_chunks=6, time_limit=60)


def per_rank_mb(timing: Timing, nranks: int) -> float:
    return timing.size_bytes / nranks / MB


def model_cost(steps: int, ratio: Fraction, alpha: float, beta: float, per_rank: float) -> float:
    return steps * alpha + float(ratio) * per_rank * beta


def best_of(evaluator: Evaluator, names: Sequence[str], size: int) -> tuple[str, float, Timing]:
    """Tune `size` over `names` only (a sub-evaluator shares the cache): (best label, time, timing)."""
    sub = evaluator.subset(names)
    result = tune_size(sub, size)
    assert result.best is not None
    _interpret(evaluator, result.best)
    return result.best.label(), result.timing.time_us, result.timing


_CHECKED: set = set()


def _interpret(evaluator: Evaluator, config) -> None:  # type: ignore[no-untyped-def]
    key = (evaluator.topology.name, config)
    if key in _CHECKED:
        return
    result = execute(evaluator.ir(config), "cpu")
    if not result.passed:
        raise SystemExit(f"{config.label()} fails the interpreter: {result.message}")
    _CHECKED.add(key)


def table_vs_library(topo: Topology, coll: str, fr: SynthesisResult, sizes: Sequence[int]) -> dict[str, int]:
    syn = [algorithm_candidate(p.algorithm, topo, coll) for p in fr.frontier if p.algorithm is not None]
    lib = library_candidates(topo, coll)
    ev = Evaluator(topo, syn + lib)
    alpha, beta = cost_model(topo)
    t = Table(title=f"{coll} on {topo.name}: best tuned synthesized vs best tuned hand-written "
                    f"(bound = max(S_lb*alpha, (R/C)_lb*per-rank*beta), S_lb={fr.steps_bound}, "
                    f"(R/C)_lb={fr.bound})")
    for col in ("size", "synthesized (us)", "config", "library (us)", "library config", "syn/lib", "bound (us)",
                "syn/bound"):
        t.add_column(col)
    wins = 0
    for size in sizes:
        s_label, s_time, s_timing = best_of(ev, [c.name for c in syn], size)
        l_label, l_time, _ = best_of(ev, [c.name for c in lib], size) if lib else ("-", math.inf, None)
        bound = max(fr.steps_bound * alpha,
                    float(fr.bound) * per_rank_mb(s_timing, topo.num_ranks) * beta)
        if coll == "allreduce":  # its per-rank bytes are not size / ranks: no bound column
            bound = math.nan
        ok = s_time <= l_time * 1.005
        wins += ok
        ratio = s_time / bound
        mark = "" if size not in (KB, GB) or coll == "allreduce" else (" ok" if ratio <= 1.05 else " MISS")
        t.add_row(format_size(size), f"{s_time:.2f}", s_label, f"{l_time:.2f}", l_label,
                  f"{s_time / l_time:.3f}{'' if ok else ' SLOWER'}", f"{bound:.2f}", f"{ratio:.3f}{mark}")
    console.print(t)
    console.print(f"synthesized not slower (0.5% tol) at {wins} of {len(sizes)} sizes\n")
    return {"wins": wins}


def table_points(cases: Sequence[tuple[Topology, str, SynthesisResult]]) -> None:
    t = Table(title="every Pareto point, compiled + tuned, vs its own model cost S*alpha + (R/C)*per-rank*beta")
    for col in ("topology", "collective", "point (C,S,R)", "size", "model (us)", "tuned (us)", "ratio",
                "Simple only (us)", "ratio", "config"):
        t.add_column(col)
    simple = Grid(protocols=("Simple",))
    for topo, coll, fr in cases:
        alpha, beta = cost_model(topo)
        for p in fr.frontier:
            assert p.algorithm is not None
            cand = algorithm_candidate(p.algorithm, topo, coll)
            ev = Evaluator(topo, [cand])
            for size in (KB, GB):
                r = tune_size(ev, size)
                rs = tune_size(ev, size, simple)
                assert r.best is not None and rs.best is not None
                _interpret(ev, r.best)
                model = model_cost(p.steps, p.rounds_per_chunk, alpha, beta, per_rank_mb(r.timing, topo.num_ranks))
                ratio = r.timing.time_us / model
                t.add_row(topo.name, coll, f"({p.chunks},{p.steps},{p.rounds})", format_size(size), f"{model:.2f}",
                          f"{r.timing.time_us:.2f}", f"{ratio:.3f}{'' if ratio <= 1.10 else ' MISS'}",
                          f"{rs.timing.time_us:.2f}", f"{rs.timing.time_us / model:.3f}", r.best.label())
    console.print(t)


MILP_CASES = (("NDv2 1 node", "topo-ndv2-1MB", "sk1-ndv2-n1"), ("NDv2 2 nodes", "topo-ndv2-1MB", "sk2-ndv2-n2"),
              ("DGX-2 2 nodes", "topo-dgx2-1MB", "sk1-dgx2-n2"))


def table_milp(time_limit: float) -> None:
    """MILP AllGather schedules (TACCL's example profiles and sketches, ours costs) at their design size."""
    import json
    from pathlib import Path

    from collsynth.encodings.sketch import load_sketch
    from collsynth.synth.milp import synthesize_milp
    from collsynth.topologies.taccl import load_taccl_profile

    examples = Path(__file__).resolve().parents[1].parent / "shared" / "examples" / "taccl"
    t = Table(title=f"MILP schedules, compiled + tuned, vs the MILP's predicted time at the design size "
                    f"(AllGather, 1 MB per rank, HiGHS, {time_limit:.0f} s limit)")
    for col in ("case", "sketch", "MILP gap", "predicted (us)", "default compile (us)", "tuned (us)", "ratio",
                "config"):
        t.add_column(col)
    for label, profile, sketch_name in MILP_CASES:
        sketch = load_sketch(examples / "sketch" / f"{sketch_name}.json")
        topo = load_taccl_profile(json.loads((examples / "topo" / f"{profile}.json").read_text()), name=profile,
                                  num_nodes=sketch.num_nodes, taccl_costs=False)
        milp = synthesize_milp(topo, "allgather", sketch, MB, solver="highs", time_limit=time_limit)
        cand = algorithm_candidate(milp.algorithm, topo, "allgather")
        ev = Evaluator(topo, [cand])
        nccl = MB * topo.num_ranks  # nccl-tests size of 1 MB per rank
        default = ev.time(Grid().start(cand, "Simple"), nccl).time_us
        r = tune_size(ev, nccl)
        assert r.best is not None
        _interpret(ev, r.best)
        ratio = r.timing.time_us / milp.predicted_us
        t.add_row(label, sketch_name, f"{milp.gap:.3f}" if milp.gap is not None else "-", f"{milp.predicted_us:.2f}",
                  f"{default:.2f}", f"{r.timing.time_us:.2f}", f"{ratio:.3f}{'' if ratio <= 1.05 else ' MISS'}",
                  r.best.label())
    console.print(t)


def table_tuner(cases: Sequence[tuple[Topology, str, list[Candidate], int]]) -> None:
    t = Table(title="tuner vs exhaustive search of the same grid (separate caches); seconds are CPU seconds")
    for col in ("case", "size", "tuner (us)", "exhaustive (us)", "tuner/exh", "evals tuner", "evals exh", "share",
                "tuner s", "max s per entry"):
        t.add_column(col)
    for topo, coll, cands, size in cases:
        cpu = time.process_time()
        tuned = tune_size(Evaluator(topo, cands), size)
        tuner_cpu = time.process_time() - cpu
        full = exhaustive_size(Evaluator(topo, cands), size)
        per_entry = 0.0
        for cand in cands:
            cpu = time.process_time()
            tune_size(Evaluator(topo, [cand]), size)
            per_entry = max(per_entry, time.process_time() - cpu)
        ratio = tuned.timing.time_us / full.timing.time_us
        share = tuned.evaluations / full.evaluations
        row = (f"{coll} {topo.name} ({len(cands)} alg)", format_size(size), f"{tuned.timing.time_us:.2f}",
               f"{full.timing.time_us:.2f}", f"{ratio:.4f}{'' if ratio <= 1.02 else ' MISS'}",
               str(tuned.evaluations), str(full.evaluations), f"{share:.1%}{'' if share <= 0.2 else ' MISS'}",
               f"{tuner_cpu:.2f}", f"{per_entry:.2f}{'' if per_entry < 2 else ' SLOW'}")
        console.print("  ".join(row), highlight=False)  # as it goes: the table comes at the end
        t.add_row(*row)
    console.print(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and cases")
    parser.add_argument("--skip", nargs="*", default=[], help="tables to skip: library points allreduce milp tuner")
    parser.add_argument("--milp-time-limit", type=float, default=120.0, help="seconds per MILP synthesis")
    args = parser.parse_args()
    sizes = [KB, MB, GB] if args.quick else SIZES
    started = time.perf_counter()
    dgx1, ring8 = resolve_topology("dgx1"), resolve_topology("ring:8")
    fronts = {(t.name, c): frontier(t, c) for t, c in ((dgx1, "allgather"), (dgx1, "reducescatter"),
                                                      (dgx1, "gather"), (ring8, "allgather"))}
    if "library" not in args.skip:
        for coll in ("allgather", "reducescatter"):
            table_vs_library(dgx1, coll, fronts[("dgx1", coll)], sizes)
    if "points" not in args.skip:
        table_points([(dgx1, "allgather", fronts[("dgx1", "allgather")]),
                      (dgx1, "reducescatter", fronts[("dgx1", "reducescatter")]),
                      (dgx1, "gather", fronts[("dgx1", "gather")]),
                      (ring8, "allgather", fronts[("ring:8", "allgather")])])
    if "allreduce" not in args.skip:
        table_vs_library(dgx1, "allreduce", frontier(dgx1, "allreduce"), sizes)
    if "milp" not in args.skip:
        table_milp(args.milp_time_limit)
    if "tuner" not in args.skip:
        cases = []
        for topo, coll, size_list in ((dgx1, "allgather", (KB, MB, 16 * MB)),
                                      (dgx1, "reducescatter", (KB, MB, 16 * MB)),
                                      (dgx1, "gather", (KB, 16 * MB)), (ring8, "allgather", (KB, 16 * MB))):
            fr = fronts[(topo.name, coll)]
            cands = [algorithm_candidate(p.algorithm, topo, coll) for p in fr.frontier if p.algorithm is not None]
            cands += library_candidates(topo, coll)
            cases += [(topo, coll, cands, s) for s in size_list]
        table_tuner(cases)
    console.print(f"total {time.perf_counter() - started:.0f} s (timings inflated by machine load)")


if __name__ == "__main__":
    main()
