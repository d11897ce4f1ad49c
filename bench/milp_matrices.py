"""Fingerprints of the LP/MILP matrices the encodings build, to check a refactoring leaves them identical.

    PYTHONPATH=<checkout A> .venv/bin/python bench/milp_matrices.py a.json [--full]
    PYTHONPATH=<checkout B> .venv/bin/python bench/milp_matrices.py b.json [--full]
    .venv/bin/python bench/milp_matrices.py --compare a.json b.json      # prints a table, SAME / DIFF per model

Fingerprint: SHA-256 of every array of the built `LpMatrix` (costs, column bounds, integrality, row bounds,
CSC starts / indices / values; -0.0 read as 0.0), with its shape. Models: the routing model of every
bench/milp.py case, the flow-LP bound of a few topologies at 1 and 2 chunks, and (--full) every model solved
in a no-budget NDv2 two-node AllGather 64 KB run (routing, spread, schedule; deterministic without a budget).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import collsynth.encodings.milp_model as milp_model
from collsynth.collectives.spec import canonical_name, make_collective
from collsynth.encodings.bounds import lower_bound_rounds_per_chunk
from collsynth.encodings.milp_instance import build_instance
from collsynth.encodings.milp_solvers import LpMatrix
from collsynth.encodings.sketch import load_sketch
from collsynth.encodings.taccl_milp import build_routing_model
from collsynth.topologies import Topology, resolve_topology
from collsynth.topologies.taccl import load_taccl_profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
import milp as bench  # noqa: E402  (the cases of bench/milp.py)

BOUND_CASES = (("dgx1", "allgather"), ("dgx1", "allreduce"), ("dgx1", "scatter"), ("dgx1", "alltoall"),
               ("fully_connected:8", "alltoall"), ("ring:8", "allgather"), ("dgx2", "allgather"))


def fingerprint(m: LpMatrix) -> str:
    digest = hashlib.sha256()
    for array in (m.cost, m.lb, m.ub, m.integer, m.row_lo, m.row_hi, m.start, m.index, m.value):
        a = np.asarray(array)
        if a.dtype.kind == "f":
            a = a + 0.0  # -0.0 -> 0.0
        digest.update(str(a.dtype).encode())
        digest.update(np.ascontiguousarray(a).tobytes())
    return f"{digest.hexdigest()[:16]} {m.num_columns} cols {len(m.row_lo)} rows {len(m.value)} nonzeros"


def _case_topology(case: bench.Case) -> tuple[Topology, Any]:
    sketch = load_sketch(bench.DEFAULT_EXAMPLES / "sketch" / f"{case.sketch}.json")
    data = json.loads((bench.DEFAULT_EXAMPLES / "topo" / f"{case.profile}.json").read_text())
    return load_taccl_profile(data, name=case.profile, num_nodes=sketch.num_nodes,
                              taccl_costs=case.costs == "taccl"), sketch


def collect(full: bool) -> dict[str, Any]:
    found: dict[str, Any] = {}
    solved: list[str] = []
    real: Callable[..., Any] = milp_model.solve_matrix

    def spy(matrix: LpMatrix, *args: Any, **kwargs: Any) -> Any:
        solved.append(f"{matrix.name} {fingerprint(matrix)}")
        return real(matrix, *args, **kwargs)

    milp_model.solve_matrix = spy  # type: ignore[assignment]
    for case in bench.CASES:
        topology, sketch = _case_topology(case)
        name = "allgather" if case.collective == "allreduce" else canonical_name(case.collective)
        inst = build_instance(topology, make_collective(name, topology.num_ranks, sketch.chunkup), sketch,
                              case.size / sketch.chunkup)
        found[f"routing {case.label} ({case.costs})"] = fingerprint(build_routing_model(inst).model.matrix())
    for spec, collective in BOUND_CASES:
        topology = resolve_topology(spec)
        solved.clear()
        for chunks in (1, 2):
            lower_bound_rounds_per_chunk(topology, make_collective(collective, topology.num_ranks, chunks))
        found[f"bound LP {spec} {collective}"] = list(solved)
    if full:
        from collsynth.synth.milp import synthesize_milp

        for case in bench.CASES:
            if case.label == "NDv2 2n AllGather 1MB total":
                topology, sketch = _case_topology(case)
                solved.clear()
                result = synthesize_milp(topology, case.collective, sketch, case.size, solver="highs")
                found[f"pipeline {case.label} ({case.costs})"] = [*solved, f"predicted {result.predicted_us}"]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", nargs="?", type=Path, help="write the fingerprints here (JSON)")
    parser.add_argument("--full", action="store_true", help="also every model of a no-budget pipeline run")
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"), help="compare two fingerprint files")
    args = parser.parse_args(argv)
    if args.compare:
        a, b = (json.loads(p.read_text()) for p in args.compare)
        print("| model | A vs B |\n|---|---|")
        for key in sorted(set(a) | set(b)):
            print(f"| {key} | {'SAME' if a.get(key) == b.get(key) else 'DIFF'} |")
        return 0
    if args.out is None:
        parser.error("give an output file or --compare A B")
    args.out.write_text(json.dumps(collect(args.full), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
