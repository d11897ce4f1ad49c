"""Synthesized algorithms (SCCL frontier points at 8 and 16 ranks, a TACCL-style schedule on 2x8 nodes) lower
to plans that pass the schema check and the plan interpreter."""

import pytest

from collsynth.collectives.spec import make_collective
from collsynth.compiler import compile_program
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.emit.mscclpp_schema import check_plan
from collsynth.language.lower import lower_to_program
from collsynth.runtime.plan import execute_plan
from collsynth.topologies.io import resolve_topology

NDV2_1MB = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
            "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
SK1_NDV2_N2 = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
               "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
               "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}


def _plan_passes(algorithm, topology):
    ir = compile_program(lower_to_program(algorithm))
    plan = ir_to_plan(ir, topology)
    check_plan(plan)
    result = execute_plan(plan)
    assert result.passed, str(result)
    return plan


@pytest.mark.parametrize("topology_name, collective, max_chunks", [
    ("dgx1", "allgather", 2), ("dgx1", "reducescatter", 1), ("ring:16", "allgather", 1),
])
def test_frontier_points_lower_to_passing_plans(topology_name, collective, max_chunks):
    from collsynth.synth import pareto_frontier

    topology = resolve_topology(topology_name)
    result = pareto_frontier(topology, make_collective(collective, topology.num_ranks), max_chunks=max_chunks,
                             time_limit=60)
    assert result.points
    for point in result.points:
        _plan_passes(point.algorithm, topology)


def test_two_node_milp_schedule_lowers_to_memory_and_port_channels():
    from collsynth.encodings.sketch import sketch_from_taccl
    from collsynth.synth.milp import synthesize_milp
    from collsynth.topologies.taccl import load_taccl_profile

    topology = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    result = synthesize_milp(topology, "allgather", sketch_from_taccl(SK1_NDV2_N2), 1 << 20, solver="highs",
                             time_limit=5)
    plan = _plan_passes(result.algorithm, topology)
    assert {ch["channel_type"] for gpu in plan["gpus"] for ch in gpu["channels"]} == {"memory", "port"}
