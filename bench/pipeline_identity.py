"""Fingerprints of the pipeline's outputs, to show that a speed-up changed nothing: for the library programs on a
few topologies (3 compile option sets each) and the 256-rank greedy AllGather (timed and default lowering), the
XML's hash, the simulated times and the Chakra traces' hash, one line each.

    nice .venv/bin/python bench/pipeline_identity.py OUT_DIR      # OUT_DIR/summary.txt and every XML
    diff BEFORE/summary.txt AFTER/summary.txt                      # run it on both trees
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

from collsynth.algorithms.registry import library_programs
from collsynth.compiler import compile_program
from collsynth.core.errors import CollsynthError
from collsynth.emit.chakra import export_chakra
from collsynth.emit.msccl_xml import ir_to_xml
from collsynth.ir import Algo
from collsynth.language.lower import lower_to_program
from collsynth.language.timed import lower_timed
from collsynth.sim.simulate import simulate
from collsynth.topologies import Topology, resolve_topology

TOPOLOGIES = ("ring:8", "dgx1", "2xndv2", "ndv4", "torus:4x4", "fully_connected:8")
COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast")
OPTION_SETS = ({}, {"instr_fusion": False}, {"pair_threadblocks": False})


def _chakra_hash(ir: Algo) -> str:
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory() as folder:
        for path in export_chakra(ir, folder, nbytes=1 << 20):
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _line(key: str, ir: Algo, topology: Topology, sizes: list[int], out: Path) -> str:
    xml = ir_to_xml(ir)
    (out / (key.replace(":", "_").replace("/", "_") + ".xml")).write_text(xml)
    times = [row.time_us for row in simulate(ir, topology, sizes).rows]
    return f"{key} {hashlib.sha256(xml.encode()).hexdigest()[:16]} {times} {_chakra_hash(ir)}"


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for topology_name in TOPOLOGIES:
        topology = resolve_topology(topology_name)
        for collective in COLLECTIVES:
            for name, program in library_programs(topology, collective):
                for options in OPTION_SETS:
                    key = f"{topology_name}-{collective}-{name}-{'_'.join(f'{k}{v}' for k, v in options.items())}"
                    try:
                        ir = compile_program(program, **options)
                    except CollsynthError as exc:
                        lines.append(f"{key} refused: {exc}")
                        continue
                    lines.append(_line(key, ir, topology, [1 << 10, 1 << 20, 1 << 28], out))
    sys.path.insert(0, str(Path(__file__).parent))
    from pipeline_scale import SHAPES, _algorithm

    topology, algorithm = _algorithm(SHAPES[256])
    for lowering, lower in (("timed", lower_timed), ("plain", lower_to_program)):
        ir = compile_program(lower(algorithm), "none")
        lines.append(_line(f"scale256{lowering}", ir, topology, [1 << 30], out))
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print(f"{len(lines)} fingerprints in {out / 'summary.txt'}")


if __name__ == "__main__":
    main()
