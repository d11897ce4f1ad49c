"""Switch channels for compiled IR: an AllReduce whose steps are one group reduce + broadcast per chunk becomes
multimem `glres` ops on NVLink SHARP topologies; every other IR gets a one-line reason."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.algorithms.mscclpp import switch_allreduce_plan
from collsynth.algorithms.registry import build
from collsynth.compiler import compile_program
from collsynth.emit.mscclpp import PlanError
from collsynth.emit.mscclpp_switch import ir_to_switch_plan, switch_owners
from collsynth.runtime.plan import execute_plan
from collsynth.sim.mscclpp import simulate_plan
from collsynth.topologies.io import resolve_topology
from collsynth.tune.backend import lowered_plans

H100 = resolve_topology("h100_nvswitch")


def _ops(plan):
    return [op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]]


@pytest.mark.parametrize("inplace", [True, False])
@pytest.mark.parametrize("instances", [1, 2])
def test_two_phase_all_pairs_becomes_glres(inplace, instances):
    ir = compile_program(build("allpairs_allreduce_two_phase", H100, inplace=inplace), instances=instances)
    owners = switch_owners(ir)
    assert isinstance(owners, list) and len(owners) == ir.gpus[0].i_chunks and set(owners) == set(range(8))
    plan = ir_to_switch_plan(ir, H100)
    assert "glres" in _ops(plan) and not {"put", "pws", "re"} & set(_ops(plan))
    assert plan["inplace"] == inplace and execute_plan(plan).passed


@pytest.mark.parametrize("program, words", [
    ("ring_allreduce", "partial sum"), ("allpairs_allreduce_one_phase", "reduced at ranks"),
    ("recursive_halving_doubling_allreduce", "reduced at ranks"), ("binomial_tree_allreduce", "reduced at ranks"),
])
def test_other_allreduces_have_no_switch_form(program, words):
    ir = compile_program(build(program, H100))
    why = switch_owners(ir)
    assert isinstance(why, str) and words in why and "\n" not in why
    with pytest.raises(PlanError, match="no switch-channel form"):
        ir_to_switch_plan(ir, H100)


def test_no_switch_channels_without_nvlink_sharp():
    ndv4 = resolve_topology("ndv4")
    with pytest.raises(PlanError, match="no NVLink SHARP"):
        ir_to_switch_plan(compile_program(build("allpairs_allreduce_two_phase", ndv4)), ndv4)


def test_switch_lowering_beats_memory_lowering_of_the_same_ir_at_large_sizes():
    ir = compile_program(build("allpairs_allreduce_two_phase", H100))
    plans, refused = lowered_plans(ir, H100, "2pa")
    assert refused == []
    switch = [p for p in plans if p.name.endswith("/switch")]
    memory = [p for p in plans if not p.name.endswith("/switch")]
    assert len(switch) == 1 and memory
    sizes = [1 << 26, 1 << 30]
    switch_us = [r.time_us for r in simulate_plan(switch[0].plan, H100, sizes).rows]
    for p in memory:
        assert all(s < m for s, m in zip(switch_us, [r.time_us for r in simulate_plan(p.plan, H100, sizes).rows],
                                         strict=True))


@given(st.integers(2, 8), st.data(), st.booleans())
def test_any_owner_assignment_passes(n, data, inplace):
    owners = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=12))
    assert execute_plan(switch_allreduce_plan(n, inplace=inplace, owners=owners)).passed


def test_cli_export_switch(tmp_path, cli_runner):
    from collsynth.cli import main
    from collsynth.emit.msccl_xml import write_xml

    xml = write_xml(compile_program(build("allpairs_allreduce_two_phase", H100)), tmp_path / "2pa.xml")
    out = tmp_path / "plan.json"
    ok = cli_runner.invoke(main, ["export", "mscclpp", str(xml), "-o", str(out), "-t", "h100_nvswitch",
                                  "--channels", "switch"])
    assert ok.exit_code == 0, ok.output
    assert "glres" in _ops(json.loads(out.read_text()))
    ring = write_xml(compile_program(build("ring_allreduce", H100)), tmp_path / "ring.xml")
    bad = cli_runner.invoke(main, ["export", "mscclpp", str(ring), "-o", str(tmp_path / "r.json"), "-t",
                                   "h100_nvswitch", "--channels", "switch"])
    assert bad.exit_code == 2 and "partial sum" in bad.output and "Traceback" not in bad.output
    assert not (tmp_path / "r.json").exists()
