"""Cluster-scale synthesis targets (issue 10): time-expanded greedy, tree packing, and the pipeline at 1024 ranks.

    nice .venv/bin/python bench/scale.py                # every row (the 1024-rank rows take minutes)
    nice .venv/bin/python bench/scale.py --quick        # skip the 1024-rank rows
    nice .venv/bin/python bench/scale.py --synth-only   # synthesis and bounds only (no compile / simulate)
    nice .venv/bin/python bench/scale.py --json hypercube:9 alltoall   # streamed JSON == to_json(), CPU of each

Tori and meshes use TACOS's link setting (50 GB/s, 0.5 us; `topologies.cluster.relinked`). Each row runs in
its own process, so that its peak memory (ru_maxrss) is its own; "synth cpu" is process CPU time
(time.process_time, meaningful on a loaded machine) and "synth MB" the peak RSS right after synthesis.
"model / bound" is the synthesizer's makespan over the cut bound; "sim / bound" is the simulated time of the
compiled schedule (`lower_timed`, `compile_program`, `simulate` at 1 GiB) over the cut bound
(`encodings.cut_bounds`); for AllReduce the reference is twice the ReduceScatter bound.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from typing import Any

from rich.console import Console
from rich.table import Table

GIB = 1 << 30


def _pipeline(topo: Any, algorithm: Any, report: dict[str, Any], chakra: bool) -> float:
    from collsynth.compiler.pipeline import compile_program
    from collsynth.emit.chakra import export_chakra
    from collsynth.language.timed import lower_timed
    from collsynth.sim.simulate import simulate

    began = time.perf_counter()
    ir = compile_program(lower_timed(algorithm))
    report["lower+compile_s"] = time.perf_counter() - began
    began = time.perf_counter()
    simulated = simulate(ir, topo, [GIB]).rows[0].time_us
    report["sim_s"] = time.perf_counter() - began
    if chakra:
        began = time.perf_counter()
        with tempfile.TemporaryDirectory() as folder:
            export_chakra(ir, folder, nbytes=GIB)
        report["chakra_s"] = time.perf_counter() - began
    return simulated


def row(kind: str, topology: str, collective: str, chakra: bool, pipeline: bool = True) -> dict[str, Any]:
    """Run one row in this process and return its figures."""
    from collsynth.collectives import make_collective
    from collsynth.encodings.cut_bounds import cut_bound_us
    from collsynth.synth.cluster.greedy import greedy
    from collsynth.synth.cluster.trees import trees
    from collsynth.topologies import resolve_topology
    from collsynth.topologies.cluster import TACOS_ALPHA_US, TACOS_GB_PER_S, relinked

    topo = resolve_topology(topology)
    if topology.split(":")[0] in RELINKED:
        topo = relinked(topo, TACOS_ALPHA_US, TACOS_GB_PER_S)
    coll = make_collective(collective, topo.num_ranks)
    began, cpu = time.perf_counter(), time.process_time()
    result = greedy(topo, coll, GIB) if kind == "greedy" else trees(topo, coll, GIB, chunks_per_tree=2)
    report: dict[str, Any] = {"synth_s": time.perf_counter() - began, "synth_cpu_s": time.process_time() - cpu,
                              "synth_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                              "status": str(result.status)}
    algorithm = result.algorithm
    assert algorithm is not None
    report["sends"] = sum(len(step.sends) for step in algorithm.steps)
    del result, coll
    began = time.process_time()
    reference = "reducescatter" if collective == "allreduce" else collective
    bound = cut_bound_us(topo, make_collective(reference, topo.num_ranks), GIB)
    report["bound_cpu_s"] = time.process_time() - began
    report["bound_us"] = bound.time_us * (2 if collective == "allreduce" else 1)
    report["bound_kind"] = bound.kind + (" x2 (RS)" if collective == "allreduce" else "")
    report["model_us"] = algorithm.provenance["makespan_us"]
    report["certified"] = algorithm.provenance.get("certified_optimal")
    report["sim_us"] = _pipeline(topo, algorithm, report, chakra) if pipeline else None
    report["peak_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return report


RELINKED = ("torus", "mesh2d", "hypercube")  # TACOS's link setting; fattree and multi-node keep their own
ROWS = (  # (kind, topology, collective, target, 1024 ranks)
    ("greedy", "torus:16x16", "allgather", "< 2 s, sim <= 1.05x ingress", False),
    ("greedy", "torus:32x32", "allgather", "< 30 s, < 4 GB, sim <= 1.05x; pipeline < 30 s each", True),
    ("greedy", "torus:16x16", "allreduce", "(no target; RS then AG)", False),
    ("greedy", "mesh2d:32x32", "allgather", "sim <= 1.05x cut bound", True),
    ("trees", "mesh2d:8x8", "allgather", "certified, < 5 s", False),
    ("trees", "hypercube:6", "allgather", "certified, < 5 s", False),
    ("trees", "torus:8x8", "allgather", "certified, < 5 s", False),
    ("trees", "mesh2d:8x8", "allreduce", "sim <= 1.10 x 2 RS bound", False),
    ("trees", "hypercube:6", "allreduce", "sim <= 1.10 x 2 RS bound", False),
    ("trees", "torus:8x8", "allreduce", "sim <= 1.10 x 2 RS bound", False),
    ("trees", "fattree:8", "allgather", "switched: certified", False),
    ("trees", "3xndv2", "allgather", "switched: certified", False),
    ("trees", "2xndv4", "allgather", "switched: certified (exact rates)", False),
    ("greedy", "hypercube:9", "alltoall", "512 ranks (was refused); synth only", True),
    ("greedy", "hypercube:10", "alltoall", "1024 ranks, < 4 GB; synth only", True),
)
SYNTH_ONLY = ("alltoall",)  # n^2 chunks x hops: millions of sends, beyond the 1024-rank pipeline's targets


def _cells(r: dict[str, Any], with_chakra: bool) -> list[str]:
    sim, bound = r["sim_us"], r["bound_us"]
    return [f"{r['synth_cpu_s']:.2f}", f"{r['synth_s']:.2f}", f"{r['synth_mb']:.0f}",
            f"{bound:.0f} us ({r['bound_kind']})", f"{r['bound_cpu_s']:.2f}",
            f"{r['model_us'] / bound:.3f}", "-" if sim is None else f"{sim / bound:.3f}",
            "-" if r["certified"] is None else str(r["certified"]),
            f"{r['lower+compile_s']:.1f}" if sim is not None else "-", f"{r['sim_s']:.1f}" if sim is not None else "-",
            f"{r.get('chakra_s', 0):.1f}" if with_chakra and sim is not None else ""]


def json_identity(topology: str, collective: str) -> dict[str, Any]:
    """Greedy-synthesize, write the algorithm with the streaming writer and with `write_atomic(to_json())`: are
    the files byte-identical, and what CPU and peak RSS (ru_maxrss, cumulative: streamed first) does each take?"""
    from collsynth.collectives import make_collective
    from collsynth.core.files import write_atomic
    from collsynth.synth.cluster.greedy import greedy
    from collsynth.topologies import resolve_topology
    from collsynth.topologies.cluster import TACOS_ALPHA_US, TACOS_GB_PER_S, relinked

    topo = resolve_topology(topology)
    if topology.split(":")[0] in RELINKED:
        topo = relinked(topo, TACOS_ALPHA_US, TACOS_GB_PER_S)
    algorithm = greedy(topo, make_collective(collective, topo.num_ranks), GIB).algorithm
    assert algorithm is not None
    report: dict[str, Any] = {"synth_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    with tempfile.TemporaryDirectory() as folder:
        began = time.process_time()
        streamed = algorithm.write_json(f"{folder}/streamed.json")
        report["streamed_cpu_s"] = time.process_time() - began
        report["after_streamed_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        began = time.process_time()
        whole = write_atomic(f"{folder}/whole.json", algorithm.to_json())
        report["to_json_cpu_s"] = time.process_time() - began
        report["after_to_json_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        report["bytes"] = streamed.stat().st_size
        report["identical"] = streamed.read_bytes() == whole.read_bytes()
    return report


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--json":
        print(json.dumps(json_identity(sys.argv[2], sys.argv[3])))
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--row":
        kind, topology, collective, chakra, pipeline = sys.argv[2:7]
        print(json.dumps(row(kind, topology, collective, chakra == "1", pipeline == "1")))
        return
    quick, pipeline = "--quick" in sys.argv, "--synth-only" not in sys.argv
    table = Table(title="collsynth cluster-scale targets (1 GiB, TACOS links: 50 GB/s, 0.5 us)")
    for name in ("synth", "topology", "coll", "synth cpu s", "synth wall s", "synth MB", "bound", "bound cpu s",
                 "model / bound", "sim / bound", "certified", "compile s", "sim s", "chakra s", "target"):
        table.add_column(name)
    for kind, topology, collective, target, big in ROWS:
        if big and quick:
            continue
        with_chakra = topology == "torus:32x32"
        out = subprocess.run([sys.executable, __file__, "--row", kind, topology, collective,
                              "1" if with_chakra else "0", "1" if pipeline and collective not in SYNTH_ONLY else "0"],
                             capture_output=True, text=True, check=False)
        if out.returncode:
            table.add_row(kind, topology, collective, "failed", *[""] * 10, out.stderr.strip().splitlines()[-1][:60])
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])
        table.add_row(kind, topology, collective, *_cells(r, with_chakra), target)
    Console(width=220).print(table)


if __name__ == "__main__":
    main()
