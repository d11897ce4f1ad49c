"""Every point of every SMT frontier the foundation tests check lowers to a DSL program, compiles with
1-4 instances, and passes the reference interpreter (issue: synthesis -> DSL -> compiler -> verify)."""

import pytest

from collsynth.collectives import make_collective
from collsynth.compiler import compile_program
from collsynth.language.lower import lower_to_program
from collsynth.runtime import execute
from collsynth.synth.pareto import pareto_frontier
from collsynth.topologies import resolve_topology

FRONTIERS = {
    "dgx1-allgather": ("dgx1", "allgather", 6),
    "dgx1-reducescatter": ("dgx1", "reducescatter", 6),
    "dgx1-gather": ("dgx1", "gather", 6),
    "ring8-allgather": ("ring:8", "allgather", 2),
    "ring4-allreduce": ("ring:4", "allreduce", 2),
}


@pytest.fixture(scope="module")
def frontier_points():
    cache = {}

    def points(key):
        if key not in cache:
            topo_name, coll_name, max_chunks = FRONTIERS[key]
            topology = resolve_topology(topo_name)
            result = pareto_frontier(topology, make_collective(coll_name, topology.num_ranks), max_chunks=max_chunks,
                                     time_limit=60)
            cache[key] = [p for p in result.points if p.algorithm is not None]
            assert cache[key], f"{key}: the sweep found no algorithm"
        return cache[key]

    return points


@pytest.mark.parametrize("key", sorted(FRONTIERS))
def test_every_frontier_point_lowers_compiles_and_passes(frontier_points, key):
    for point in frontier_points(key):
        for instances in (1, 2, 3, 4):
            program = lower_to_program(point.algorithm, instances=instances)
            ir = compile_program(program)
            assert ir.nchannels >= instances
            # a size that splits evenly into every chunk count used here, with several tiles
            result = execute(ir, backend="cpu", nbytes=point.chunks * instances * 8 * 1024 * 3)
            label = f"{key} (C={point.chunks}, S={point.steps}, R={point.rounds}) x{instances}"
            assert result.passed, f"{label}: {result.message}"
