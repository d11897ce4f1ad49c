"""The node-rail AllToAll composition lowered with one rail message per GPU and remote node
(`lower_rail_gather`): correct in the reference interpreter, one remote op per (GPU, remote node), and
faster than the block-per-message lowering where the NIC is the bottleneck."""

from __future__ import annotations

import pytest

from collsynth.algorithms.hier_lower import lower_composition, lower_rail_gather
from collsynth.collectives import make_collective
from collsynth.compiler.pipeline import compile_program
from collsynth.language.lower import LoweringError
from collsynth.runtime import execute
from collsynth.schedule import Algorithm
from collsynth.sim.simulate import simulate
from collsynth.synth.cluster.hierarchical import hierarchical
from collsynth.topologies import Topology, builtin


def _plan(topology: str, plan: str, chunks: int = 1) -> tuple[Topology, Algorithm]:
    topo = builtin(topology)
    found = hierarchical(topo, make_collective("alltoall", topo.num_ranks, chunks), 1 << 20,
                         sources=["direct"]).algorithms
    return topo, next(a for a in found if a.provenance["plan"] == plan)


@pytest.mark.parametrize(("topology", "chunks"), [("2xndv4", 1), ("4xndv4", 1), ("2xndv4", 2)])
def test_rail_gather_program_passes_the_interpreter(topology: str, chunks: int) -> None:
    _, algorithm = _plan(topology, "node-rail", chunks)
    verdict = execute(compile_program(lower_rail_gather(algorithm)), "cpu")
    assert verdict.passed, verdict.message


def test_one_rail_message_per_gpu_and_remote_node_and_faster_at_1gb() -> None:
    topo, algorithm = _plan("4xndv4", "node-rail")
    program = lower_rail_gather(algorithm)
    remote = [op for op in program.ops if topo.machines[op.src.rank] != topo.machines[op.dst.rank]]
    assert len(remote) == 32 * 3
    options = {"instr_fusion": False, "pair_threadblocks": False}
    ours = simulate(compile_program(program, **options), topo, [1 << 30]).rows[0].time_us
    blocks = simulate(compile_program(lower_composition(algorithm), **options), topo, [1 << 30]).rows[0].time_us
    assert ours < 0.8 * blocks


def test_only_the_direct_node_rail_composition_has_a_rail_gather_program() -> None:
    _, algorithm = _plan("2xndv4", "rail-node")
    with pytest.raises(LoweringError, match="not the node-rail composition"):
        lower_rail_gather(algorithm)
