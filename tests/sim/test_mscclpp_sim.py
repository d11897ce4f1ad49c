"""Plan timing under the simulator's own tables: closed forms for single primitives, and the model's verdict on
the paper's algorithms (computed, not asserted into the model)."""

import copy

import pytest

from collsynth.algorithms.mscclpp import switch_allreduce_plan
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.runtime import samples
from collsynth.sim import LOCAL_ALPHA_US, LOCAL_BETA_US_PER_MB, SimError
from collsynth.sim.mscclpp import plan_time_us, simulate_plan
from collsynth.sim.protocol import EFFICIENCY, latency_scale
from collsynth.topologies.io import resolve_topology

MB = 1 << 20


def _two_rank_ring_plan(protocol="Simple"):
    from dataclasses import replace
    return ir_to_plan(replace(samples.ring_allgather(2), proto=protocol))


def test_one_put_and_signal_cost_the_link_figures():
    topology = resolve_topology("ring:2")
    link = topology.link_between(0, 1)
    plan = _two_rank_ring_plan()
    chunk_mb = 0.5
    hop = link.alpha_us * latency_scale("LL", link.kind)
    # each rank: local copy of its own chunk, put (hop + m*beta), signal (arrives one hop later), wait
    local = LOCAL_ALPHA_US + chunk_mb * LOCAL_BETA_US_PER_MB
    expected = local + hop + chunk_mb * link.beta_us_per_mb + hop
    assert plan_time_us(plan, topology, chunk_mb) == pytest.approx(expected)


def test_packets_cost_an_ll_hop_then_a_local_unpack():
    topology = resolve_topology("ring:2")
    link = topology.link_between(0, 1)
    plan = _two_rank_ring_plan("LL")
    chunk_mb = 0.25
    hop = link.alpha_us * latency_scale("LL", link.kind) + chunk_mb * link.beta_us_per_mb / EFFICIENCY["LL"]
    local = LOCAL_ALPHA_US + chunk_mb * LOCAL_BETA_US_PER_MB
    expected = local + hop + local  # copy own chunk, packets to the peer, unpack the peer's packets
    assert plan_time_us(plan, topology, chunk_mb) == pytest.approx(expected)


def test_time_grows_with_size_and_rows_follow_nccl_tests():
    topology = resolve_topology("h100_nvswitch")
    result = simulate_plan(switch_allreduce_plan(8), topology, [1024, MB, 64 * MB])
    times = [row.time_us for row in result.rows]
    assert times == sorted(times) and times[0] > 0
    assert [row.size_bytes for row in result.rows] == [1024, MB, 64 * MB]
    assert result.rows[0].busbw_GBps == pytest.approx(result.rows[0].algbw_GBps * 2 * 7 / 8)


def test_switch_reduce_moves_less_through_each_port_than_memory_channels():
    """2PA over the switch sends (n+1)/n of the buffer through each GPU port per direction, memory-channel 2PA
    2(n-1)/n: at bandwidth-bound sizes the model must show the switch ahead (computed from the port budgets)."""
    from collsynth.algorithms.mscclpp import MSCCLPP_VARIANTS
    from collsynth.tune.backend import variant_plan

    topology = resolve_topology("h100_nvswitch")
    variants = {v.name: v for v in MSCCLPP_VARIANTS}
    switch = plan_time_us(variant_plan(variants["mscclpp_2pa_switch"], topology).plan, topology, 64.0)
    memory = plan_time_us(variant_plan(variants["mscclpp_2pa_memory"], topology).plan, topology, 64.0)
    assert switch < memory


def test_a_deadlocked_plan_is_an_error_not_a_hang():
    plan = copy.deepcopy(_two_rank_ring_plan())
    for gpu in plan["gpus"]:
        for tb in gpu["threadblocks"]:
            tb["ops"] = [op for op in tb["ops"] if op["name"] != "signal"]
    with pytest.raises(SimError, match="deadlocks"):
        plan_time_us(plan, resolve_topology("ring:2"), 1.0)


def test_rank_count_must_match():
    with pytest.raises(SimError, match="ranks"):
        simulate_plan(switch_allreduce_plan(4), resolve_topology("h100_nvswitch"), [1024])


def test_relaxed_sync_times_as_sync_and_uncosted_ops_are_refused():
    import copy

    import pytest

    from collsynth.algorithms.mscclpp import switch_allreduce_plan
    from collsynth.sim.mscclpp import simulate_plan
    from collsynth.sim.nccl import SimError
    from collsynth.topologies.io import resolve_topology

    topology = resolve_topology("h100_nvswitch")
    plan = switch_allreduce_plan(8)
    relaxed = copy.deepcopy(plan)
    for gpu in relaxed["gpus"]:
        for op in gpu["threadblocks"][0]["ops"]:
            op["name"] = {"signal": "rlxsignal", "wait": "rlxwait"}.get(op["name"], op["name"])
    sizes = [1 << 10, 1 << 20]
    assert ([r.time_us for r in simulate_plan(relaxed, topology, sizes).rows]
            == [r.time_us for r in simulate_plan(plan, topology, sizes).rows])
    stored = copy.deepcopy(plan)
    for gpu in stored["gpus"]:
        for op in gpu["threadblocks"][0]["ops"]:
            if op["name"] == "glres":
                op["name"] = "gstore"
    with pytest.raises(SimError, match="does not time 'gstore'") as info:
        simulate_plan(stored, topology, sizes)
    assert "\n" not in str(info.value)
