"""IR -> MSCCL++ execution plan: every library program lowers to a plan that passes the schema check and the
plan interpreter, at 8 and 16 ranks and 2x8 nodes; what a plan cannot express is one PlanError."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.algorithms import library_programs
from collsynth.compiler import compile_program
from collsynth.emit.mscclpp import PlanError, global_order, ir_to_plan
from collsynth.emit.mscclpp_schema import MAX_CHANNELS_PER_TB, MAX_OPERATIONS_PER_TB, check_plan
from collsynth.runtime import samples
from collsynth.runtime.plan import execute_plan
from collsynth.topologies.io import resolve_topology

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "alltonext")


def _library(topology_name):
    topology = resolve_topology(topology_name)
    return [(topology, name, prog) for coll in COLLECTIVES for name, prog in library_programs(topology, coll)]


@pytest.mark.parametrize("topology_name", ["ndv4", "dgx2", "2xndv4"])
def test_every_library_program_lowers_to_a_plan_that_passes_the_interpreter(topology_name):
    programs = _library(topology_name)
    assert len(programs) >= 5
    for topology, name, program in programs:
        ir = compile_program(program)
        plan = ir_to_plan(ir, topology)
        check_plan(plan)
        for gpu in plan["gpus"]:
            for tb in gpu["threadblocks"]:
                assert len(tb["ops"]) <= MAX_OPERATIONS_PER_TB
                for entry in tb["channels"]:
                    assert len(entry["channel_ids"]) <= MAX_CHANNELS_PER_TB
        result = execute_plan(plan, collective=program.collective if name == "alltonext" else None)
        assert result.passed, f"{topology_name} {name}: {result}"


def test_cross_node_messages_use_port_channels_with_flush_and_intra_node_memory_channels():
    topology = resolve_topology("2xndv4")
    program = dict(library_programs(topology, "allreduce"))["hierarchical_allreduce"]
    plan = ir_to_plan(compile_program(program), topology)
    kinds = {ch["channel_type"] for gpu in plan["gpus"] for ch in gpu["channels"]}
    assert kinds == {"memory", "port"}
    for gpu in plan["gpus"]:
        for ch in gpu["channels"]:
            for peer in ch["connected_to"]:
                same_node = topology.node_of(peer) == topology.node_of(gpu["id"])
                assert same_node == (ch["channel_type"] == "memory")
    names = [op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]
             if op.get("channel_type") == "port"]
    assert names.count("pwsf") > 0 and "put" not in names  # put, signal and flush in one proxy request


def test_ll_ir_becomes_packet_ops_with_a_double_scratch_buffer():
    ir = compile_program(dict(library_programs(resolve_topology("ndv4"), "allreduce"))["allpairs_allreduce_one_phase"],
                         protocol="LL")
    plan = ir_to_plan(ir)
    names = {op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]}
    assert plan["protocol"] == "LL" and plan["use_double_scratch_buffer"] is True
    assert "ppkt" in names and not names & {"put", "signal", "wait"}
    assert execute_plan(plan).passed


def _port_ll_plan():
    topology = resolve_topology("2xndv4")
    program = dict(library_programs(topology, "allreduce"))["hierarchical_allreduce"]
    return ir_to_plan(compile_program(program, protocol="LL"), topology)


def test_ll_across_nodes_packs_packets_before_the_port_put():
    """MSCCL++'s executor DMAs a port ppkt's source as it is ("assume src and dst are in packet format"): each
    cross-node LL message is first packed into a scratch slot of the sender's (cpkt), and that slot is put."""
    plan = _port_ll_plan()
    port_puts = 0
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            ops = tb["ops"]
            for k, op in enumerate(ops):
                if op["name"] == "ppkt" and op["channel_type"] == "port":
                    port_puts += 1
                    packed = ops[k - 1]
                    assert packed["name"] == "cpkt" and packed["dst_buff"] == op["src_buff"]
                    assert op["src_buff"][0]["type"] == "s"
    assert port_puts > 0
    assert execute_plan(plan).passed


def test_a_port_ppkt_of_plain_data_is_refused():
    plan = _port_ll_plan()
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            ops = tb["ops"]
            for k, op in enumerate(ops):
                if op["name"] == "ppkt" and op["channel_type"] == "port":
                    op["src_buff"] = ops[k - 1]["src_buff"]  # put the plain value itself, as before the fix
    result = execute_plan(plan)
    assert not result.passed and "port" in result.message and "cpkt" in result.message


def test_data_put_over_a_port_channel_must_be_flushed_before_the_plan_ends():
    topology = resolve_topology("2xndv4")
    program = dict(library_programs(topology, "allreduce"))["hierarchical_allreduce"]
    plan = ir_to_plan(compile_program(program), topology)
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                if op["name"] == "pwsf":
                    op["name"] = "pws"  # put and signal, no flush: the proxy may still read the source
    result = execute_plan(plan)
    assert not result.passed and "never flushed" in result.message


def test_packets_put_from_scratch_need_no_flush():
    """The receiver waits for the packets' flags and the next run uses the other half of the double scratch
    buffer, so (as in MSCCL++'s own multi-node packet programs) no flush is needed."""
    plan = _port_ll_plan()
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if op["name"] != "flush"]
    assert execute_plan(plan).passed


def test_long_threadblocks_are_split_and_chained_by_semaphores():
    ir = samples.ring_allreduce(24)
    assert len(ir.gpus[0].tbs[0].steps) * 2 > MAX_OPERATIONS_PER_TB
    plan = ir_to_plan(ir)
    longest = max(len(tb["ops"]) for tb in plan["gpus"][0]["threadblocks"])
    assert longest <= MAX_OPERATIONS_PER_TB
    assert len(plan["gpus"][0]["threadblocks"]) > len(ir.gpus[0].tbs)
    assert plan["gpus"][0]["semaphores"]
    assert execute_plan(plan).passed


def test_global_order_respects_every_receive():
    ir = samples.ring_allgather(4)
    order = global_order(ir)
    assert len(order) == ir.num_steps
    assert len({(rank, tb.id, step.s) for rank, tb, step in order}) == ir.num_steps


def test_ll128_and_bad_channel_policies_are_one_line_errors():
    ir = samples.ring_allreduce(4)
    from dataclasses import replace
    with pytest.raises(PlanError, match="LL128"):
        ir_to_plan(replace(ir, proto="LL128"))
    with pytest.raises(PlanError, match="channel policy"):
        ir_to_plan(ir, channels="nvlink")
    with pytest.raises(PlanError, match="different nodes"):
        two_node = resolve_topology("2xndv4")
        program = dict(library_programs(two_node, "allreduce"))["hierarchical_allreduce"]
        ir_to_plan(compile_program(program), two_node, channels="memory")


@pytest.mark.parametrize("groups", [1, 2, 3])
def test_grouped_threadblocks_pass_and_use_at_most_that_many(groups):
    topology = resolve_topology("ndv4")
    program = dict(library_programs(topology, "allreduce"))["allpairs_allreduce_two_phase"]
    ir = compile_program(program)
    plan = ir_to_plan(ir, topology, groups=groups)
    assert all(len(gpu["threadblocks"]) == groups for gpu in plan["gpus"])  # short enough: no split
    assert execute_plan(plan).passed


def test_default_grouping_keeps_every_ir_threadblock_when_semaphores_allow():
    ir = samples.ring_allgather(4)
    plan = ir_to_plan(ir)
    assert [len(gpu["threadblocks"]) for gpu in plan["gpus"]] == [len(gpu.tbs) for gpu in ir.gpus]
    with pytest.raises(PlanError, match="at least one"):
        ir_to_plan(ir, groups=0)


@settings(max_examples=15, deadline=None)
@given(st.integers(2, 9), st.integers(1, 3), st.booleans(), st.booleans(), st.sampled_from(["Simple", "LL"]))
def test_lowered_ring_allreduce_passes_for_any_shape(n, channels, inplace, fused, protocol):
    from dataclasses import replace

    ir = replace(samples.ring_allreduce(n, channels=channels, inplace=inplace, fused=fused), proto=protocol)
    plan = ir_to_plan(ir)
    check_plan(plan)
    assert execute_plan(plan).passed


def _scratch_bytes(plan):
    """Per rank, the scratch byte ranges (in chunks) that ops touch as packets and as plain data, by the
    executor's rule: packets of chunk index i start at byte 2 * i * chunk, plain data at i * chunk."""
    packet_srcs = {"upkt": 0, "rppkt": 0, "repkt": 1, "respkt": 1, "recpkt": 1, "recspkt": 1}
    for gpu in plan["gpus"]:
        packets, plain = set(), set()
        for tb in gpu["threadblocks"]:
            for op in tb["ops"]:
                name = op["name"]
                for k, buff in enumerate(op.get("src_buff", [])):
                    as_packets = (name in packet_srcs and k >= packet_srcs[name]) or (
                        name == "ppkt" and op["channel_type"] == "port")
                    if buff.get("type") == "s":
                        (packets if as_packets else plain).add((buff["index"], buff["size"]))
                for k, buff in enumerate(op.get("dst_buff", [])):
                    if buff.get("type") == "s":
                        as_packets = name == "cpkt" or (name in ("recpkt", "recspkt") and k == 1)
                        (packets if as_packets else plain).add((buff["index"], buff["size"]))
        yield gpu, [(2 * i, 2 * (i + n)) for i, n in packets], [(i, i + n) for i, n in plain]


@pytest.mark.parametrize("n", [3, 5])
def test_ll_scratch_keeps_forwarded_values_apart_from_packet_slots(n):
    """An LL ring AllReduce forwards reduced values (rrs) from plain scratch slots while packets land in
    others: the slots' bytes never overlap, and the plan asks for enough scratch for the packets."""
    from dataclasses import replace

    ir = replace(samples.ring_allreduce(n, fused=True), proto="LL")
    assert any(step.type == "rrs" for gpu in ir.gpus for tb in gpu.tbs for step in tb.steps)
    plan = ir_to_plan(ir)
    for gpu, packets, plain in _scratch_bytes(plan):
        assert packets and plain
        assert all(b <= 2 * gpu["scratch_chunks"] for _, b in packets)
        assert not [(p, q) for p in packets for q in plain if p[0] < q[1] and q[0] < p[1]], gpu["id"]
    assert execute_plan(plan).passed
