"""Issue 13's targets, re-checked through the per-size chooser's own lowering (collsynth.tune.backend): every
plan of every library program and synthesized frontier point at 8 and 16 ranks and on 2x8 nodes -- each IR
lowered under every protocol a plan can say and each threadblock grouping -- passes the schema check and the
plan interpreter. The CI subset is one topology; the full sweep is marked slow (pytest -m slow)."""

import pytest

from collsynth.algorithms import library_programs
from collsynth.collectives.spec import make_collective
from collsynth.compiler import compile_program
from collsynth.language.lower import lower_to_program
from collsynth.runtime.plan import execute_plan
from collsynth.topologies.io import resolve_topology
from collsynth.tune.backend import PLAN_GROUPS, PLAN_PROTOCOLS, lowered_plans, mscclpp_plans

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall")


def _all_plans_pass(topology, ir, label):
    plans, refused = lowered_plans(ir, topology, label)
    assert refused == [], refused[:1]
    assert len(plans) >= len(PLAN_PROTOCOLS)  # at least one grouping per protocol (equal groupings dedupe)
    assert len(plans) <= len(PLAN_PROTOCOLS) * len(PLAN_GROUPS) + 1  # + the switch form, where it exists
    for plan in plans:
        result = execute_plan(plan.plan)
        assert result.passed, f"{plan.name}: {result}"


def _library(topology_name):
    topology = resolve_topology(topology_name)
    return topology, [(name, program) for coll in COLLECTIVES for name, program in library_programs(topology, coll)]


@pytest.mark.parametrize("topology_name", ["ndv4"])
def test_library_plans_ci_subset(topology_name):
    topology, programs = _library(topology_name)
    assert len(programs) >= 8
    for name, program in programs:
        _all_plans_pass(topology, compile_program(program), name)
    assert len(mscclpp_plans(topology)) == 3  # 1PA, 2PA memory, 2PA port


@pytest.mark.slow
@pytest.mark.parametrize("topology_name", ["dgx2", "2xndv4", "h100_nvswitch"])
def test_library_plans_16_ranks_and_two_nodes(topology_name):
    topology, programs = _library(topology_name)
    for name, program in programs:
        _all_plans_pass(topology, compile_program(program), name)
    assert mscclpp_plans(topology)


@pytest.mark.slow
@pytest.mark.parametrize("topology_name, collective, max_chunks", [
    ("dgx1", "allgather", 2), ("dgx1", "reducescatter", 2), ("dgx1", "allreduce", 1), ("ring:16", "allgather", 1),
    ("ring:16", "reducescatter", 1),
])
def test_frontier_points(topology_name, collective, max_chunks):
    from collsynth.synth import pareto_frontier

    topology = resolve_topology(topology_name)
    result = pareto_frontier(topology, make_collective(collective, topology.num_ranks), max_chunks=max_chunks,
                             time_limit=120)
    assert result.frontier
    for point in result.frontier:
        _all_plans_pass(topology, compile_program(lower_to_program(point.algorithm)), point.algorithm.name)


@pytest.mark.slow
def test_two_node_milp_schedule():
    from collsynth.encodings.sketch import sketch_from_taccl
    from collsynth.synth.milp import synthesize_milp
    from collsynth.topologies.taccl import load_taccl_profile

    ndv2 = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
            "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
    sketch = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
              "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
              "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}
    topology = load_taccl_profile(ndv2, name="ndv2", num_nodes=2)
    result = synthesize_milp(topology, "allgather", sketch_from_taccl(sketch), 1 << 20, solver="highs", time_limit=5)
    _all_plans_pass(topology, compile_program(lower_to_program(result.algorithm)), "milp_2x8")
