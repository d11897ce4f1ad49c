"""Fingerprints of every schedule built by reversal into a reduction (MILP, cluster greedy, tree packing,
Algorithm level), to check that a refactoring of the reversal changes no output.

    PYTHONPATH=<checkout> .venv/bin/python bench/reversal_identity.py OUT.json [--milp-full]
    .venv/bin/python bench/reversal_identity.py --compare BEFORE.json AFTER.json

Each entry is the SHA-256 of the algorithm's JSON without its provenance (steps, sends, start/duration
floats as written) and the makespan the synthesizer predicts. MILP runs have no time limit (deterministic):
ReduceScatter and AllReduce on the one-node bench/milp.py profiles (`--milp-full` adds two-node NDv2)."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from collsynth.collectives import make_collective
from collsynth.encodings.sketch import load_sketch
from collsynth.schedule import Algorithm, reversed_into_reduction
from collsynth.synth.cluster.greedy import greedy
from collsynth.synth.cluster.trees import trees
from collsynth.synth.milp import synthesize_milp
from collsynth.topologies import resolve_topology
from collsynth.topologies.symmetry import reversed_topology
from collsynth.topologies.taccl import load_taccl_profile

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT.parent / "shared" / "examples" / "taccl"
MB = 1 << 20

MILP_CASES = (("topo-ndv2-1MB", "sk1-ndv2-n1", MB, True), ("topo-ndv2-1MB", "sk1-ndv2-n1", MB, False),
              ("topo-ndv2-1MB", "sk-ndv2-n1-cUp6", MB, False), ("topo-dgx2-1MB", "sk-dgx2-n1", MB, False))
MILP_FULL_CASES = (("topo-ndv2-1MB", "sk1-ndv2-n2", MB // 16, False),)
GREEDY_TOPOLOGIES = ("ring:8", "dgx1", "ndv2", "2xndv2", "4xdgx1", "torus:4x4", "8xndv4")
TREE_TOPOLOGIES = ("torus:4x4", "ndv2", "hypercube:4")


def fingerprint(algorithm: Algorithm) -> str:
    doc = algorithm.to_dict()
    doc.pop("provenance")
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def milp_entries(full: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for profile, sketch_name, size, taccl in MILP_CASES + (MILP_FULL_CASES if full else ()):
        sketch = load_sketch(EXAMPLES / "sketch" / f"{sketch_name}.json")
        data = json.loads((EXAMPLES / "topo" / f"{profile}.json").read_text())
        topology = load_taccl_profile(data, name=profile, num_nodes=sketch.num_nodes, taccl_costs=taccl)
        for collective in ("reducescatter", "allreduce"):
            result = synthesize_milp(topology, collective, sketch, size, solver="highs")
            key = f"milp {profile} {sketch_name} {'taccl' if taccl else 'ours'} {collective}"
            out[key] = [fingerprint(result.best), result.predicted_us]
            print(key, out[key], flush=True)
    return out


def cluster_entries() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in GREEDY_TOPOLOGIES:
        topology = resolve_topology(name)
        for collective in ("reducescatter", "reduce", "allreduce"):
            for size in (1 << 16, 1 << 26):
                result = greedy(topology, make_collective(collective, topology.num_ranks, root=0), size)
                key = f"greedy {name} {collective} {size}"
                out[key] = [fingerprint(result.algorithms[0]), result.algorithms[0].provenance["makespan_us"]]
    for name in TREE_TOPOLOGIES:
        topology = resolve_topology(name)
        for collective in ("reducescatter", "allreduce"):
            result = trees(topology, make_collective(collective, topology.num_ranks))
            key = f"trees {name} {collective}"
            out[key] = [fingerprint(result.algorithms[0]), result.algorithms[0].provenance.get("makespan_us")]
    return out


def algorithm_entries() -> dict[str, Any]:
    """Algorithm level: greedy AllGather / Broadcast schedules on the reversed topology, reversed."""
    out: dict[str, Any] = {}
    for name in GREEDY_TOPOLOGIES[:4]:
        topology = resolve_topology(name)
        for dual, combining in (("allgather", "reducescatter"), ("broadcast", "reduce")):
            n = topology.num_ranks
            forward = greedy(reversed_topology(topology), make_collective(dual, n, root=0), 1 << 20).algorithms[0]
            untimed = Algorithm(forward.name, forward.topology, forward.collective,
                                tuple(type(s)(s.rounds, tuple(type(x)(x.chunk, x.src, x.dst) for x in s.sends))
                                      for s in forward.steps))
            for label, source in (("timed", forward), ("untimed", untimed)):
                reduced = reversed_into_reduction(source, topology, make_collective(combining, n, root=0))
                out[f"algorithm {name} {combining} {label}"] = [fingerprint(reduced), None]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?")
    parser.add_argument("--milp-full", action="store_true")
    parser.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)
    if args.compare:
        before, after = (json.loads(Path(p).read_text()) for p in args.compare)
        differ = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
        for key in differ:
            print(f"DIFFERENT {key}: {before.get(key)} -> {after.get(key)}")
        print(f"{len(before.keys() & after.keys()) - len(differ)} identical, {len(differ)} different")
        return 1 if differ else 0
    entries = {**algorithm_entries(), **cluster_entries(), **milp_entries(args.milp_full)}
    Path(args.out).write_text(json.dumps(entries, indent=1, sort_keys=True))
    print(f"{len(entries)} fingerprints -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
