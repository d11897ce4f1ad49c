"""The simulator against closed forms: ring AllReduce, one link, contention, switches, pipelining."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sim_irs import (
    chain_broadcast_ir,
    deadlock_ir,
    every_step_type_ir,
    fan_in_ir,
    local_ops_ir,
    ring_allreduce_ir,
    send_recv_ir,
)

from collsynth.core.errors import CollsynthError
from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.sim import SimError, SimModel, simulate
from collsynth.topologies import Link, Switch, Topology, fully_connected, line, ring

MiB = 1 << 20
ALPHA = 0.7  # the default NVLink link of the built-in topologies
BETA = 46.0
TILE = 2 * MiB  # Simple protocol


def one_time(ir: Algo, topology: Topology, size: int, **model) -> float:
    return simulate(ir, topology, [size], model=SimModel(**model)).rows[0].time_us


def ring_closed_form(n: int, size: int) -> float:
    """2(n-1)(alpha + beta*S/n) per tile; T tiles of S/(nT) bytes each: 2(n-1)(T*alpha + beta*S/n)."""
    tiles = max(1, math.ceil(size / n / TILE))
    return 2 * (n - 1) * (tiles * ALPHA + BETA * size / n / MiB)


@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("size", [4096, 1 * MiB, 8 * MiB])
def test_ring_allreduce_matches_closed_form(n: int, size: int) -> None:
    assert one_time(ring_allreduce_ir(n), ring(n), size) == pytest.approx(ring_closed_form(n, size), rel=1e-9)


@given(n=st.integers(2, 12), elems=st.integers(1, 1 << 24))
def test_ring_allreduce_closed_form_property(n: int, elems: int) -> None:
    size = 4 * elems  # float32 elements, so the nccl-tests size column is exactly `size`
    result = simulate(ring_allreduce_ir(n), ring(n), [size])
    assert result.rows[0].size_bytes == size
    assert result.rows[0].time_us == pytest.approx(ring_closed_form(n, size), rel=1e-9)


def test_ring_allreduce_busbw_approaches_link_bandwidth() -> None:
    row = simulate(ring_allreduce_ir(8), ring(8), [1 << 30]).rows[0]
    link_gbps = MiB / BETA / 1e3  # bytes per us -> GB/s
    assert row.busbw_GBps == pytest.approx(row.algbw_GBps * 2 * 7 / 8)
    assert 0.95 * link_gbps < row.busbw_GBps < link_gbps


def test_single_link_costs_alpha_plus_beta_size() -> None:
    for size in (0, 1000, MiB, 2 * MiB):
        assert one_time(send_recv_ir(), line(2), size) == pytest.approx(ALPHA + BETA * size / MiB)
    # cnt = 3 chunks of size/3 each: one transfer of the whole size
    assert one_time(send_recv_ir(cnt=3, nchunks=3), line(2), 3 * MiB // 2) == pytest.approx(ALPHA + BETA * 1.5)


def test_two_flows_on_one_link_serialize() -> None:
    one = one_time(send_recv_ir(channels=1), line(2), MiB)
    two = one_time(send_recv_ir(channels=2), line(2), MiB)
    assert one == pytest.approx(ALPHA + BETA)
    assert two == pytest.approx(2 * (ALPHA + BETA))


def test_flows_on_different_links_overlap() -> None:
    assert one_time(fan_in_ir(), fully_connected(3), MiB) == pytest.approx(ALPHA + BETA)


def _with_switch(bandwidth: int, beta: float = BETA) -> Topology:
    base = fully_connected(3)
    return Topology("fc3+switch", 3, base.link_list, (Switch("into2", frozenset({(0, 2), (1, 2)}), bandwidth, beta),))


def test_switch_budget_serializes_its_links() -> None:
    assert one_time(fan_in_ir(), _with_switch(1), MiB) == pytest.approx(2 * (ALPHA + BETA))
    assert one_time(fan_in_ir(), _with_switch(2), MiB) == pytest.approx(ALPHA + BETA)


def test_slow_switch_sets_the_transfer_rate() -> None:
    assert one_time(fan_in_ir(), _with_switch(2, beta=3 * BETA), MiB) == pytest.approx(ALPHA + 3 * BETA)


def test_links_use_their_own_costs() -> None:
    slow = Topology("slow", 2, (Link(0, 1, 1, 5.0, 100.0), Link(1, 0)))
    assert one_time(send_recv_ir(), slow, 2 * MiB) == pytest.approx(5.0 + 200.0)


def test_tiles_pipeline_through_a_chain() -> None:
    # T tiles flow down n-1 hops: (n-1 + T-1) slots of alpha + beta*S/T
    n, size = 5, 16 * MiB
    tiles = size // TILE
    expected = (n - 1 + tiles - 1) * (ALPHA + BETA * size / tiles / MiB)
    assert one_time(chain_broadcast_ir(n), line(n), size) == pytest.approx(expected)
    result = simulate(chain_broadcast_ir(n), line(n), [size])
    assert result.tiles == (tiles,)


def test_tile_bytes_option_changes_the_tiling() -> None:
    n, size = 4, MiB
    expected = (n - 1 + 3) * (ALPHA + BETA * size / 4 / MiB)
    assert one_time(chain_broadcast_ir(n), line(n), size, tile_bytes=size // 4) == pytest.approx(expected)


def test_ll_protocol_uses_small_tiles() -> None:
    result = simulate(chain_broadcast_ir(3, proto="LL"), line(3), [MiB])
    assert result.tiles == (32,)


def test_local_steps_cost_local_alpha_beta_and_wait_for_dependencies() -> None:
    time = one_time(local_ops_ir(), Topology("one", 1, ()), 2 * MiB, local_alpha_us=0.5, local_beta_us_per_mb=3.0)
    assert time == pytest.approx(2 * (0.5 + 3.0 * 2))  # cpy then re, serialized by the dependency


def test_every_step_type_runs() -> None:
    result = simulate(every_step_type_ir(), line(3), [4 * MiB, 64 * MiB])
    assert all(row.time_us > 0 for row in result.rows)
    assert result.rows[1].time_us > result.rows[0].time_us


@pytest.mark.parametrize("ir, topology", [
    (ring_allreduce_ir(6, proto="LL"), ring(6)),
    (chain_broadcast_ir(6, proto="LL"), line(6)),
    (every_step_type_ir(), line(3)),
])
def test_steady_state_extrapolation_matches_exact(ir: Algo, topology: Topology) -> None:
    size = 24 * MiB if ir.proto == "LL" else 256 * MiB
    exact = simulate(ir, topology, [size], model=SimModel(max_exact_tiles=100_000))
    approx = simulate(ir, topology, [size], model=SimModel(max_exact_tiles=8))
    assert approx.extrapolated == (True,) and exact.extrapolated == (False,)
    assert approx.tiles == exact.tiles and approx.tiles[0] > 8
    assert approx.rows[0].time_us == pytest.approx(exact.rows[0].time_us, rel=1e-6)


def test_extrapolation_under_contention_is_close() -> None:
    # two channels share every ring link in one direction: the tiles interleave on the links
    n = 4
    tbs_of = []
    for r in range(n):
        tbs = []
        for ch in range(2):
            steps = ring_allreduce_ir(n).gpus[r].tbs[0].steps
            tbs.append(Threadblock(ch, (r + 1) % n, (r - 1) % n, ch, steps))
        tbs_of.append(Gpu(r, n, n, 0, tuple(tbs)))
    ir = Algo("ring2ch", "allreduce", "LL", 2, n, n, True, tuple(tbs_of))
    exact = simulate(ir, ring(n), [8 * MiB], model=SimModel(max_exact_tiles=100_000)).rows[0].time_us
    approx = simulate(ir, ring(n), [8 * MiB], model=SimModel(max_exact_tiles=16)).rows[0].time_us
    assert approx == pytest.approx(exact, rel=1e-3)


def test_missing_link_names_the_pair() -> None:
    with pytest.raises(SimError, match=r"3->0.*no link"):
        simulate(ring_allreduce_ir(4), line(4), [MiB])


def test_deadlock_names_the_stuck_threadblocks() -> None:
    with pytest.raises(SimError, match=r"deadlocks: gpu 0 tb 0 step 0 \(tile 0\) waits for a message from 1"):
        simulate(deadlock_ir(), line(2), [MiB])


def test_unmatched_sends_are_rejected() -> None:
    ir = send_recv_ir()
    gpu1 = Gpu(1, 1, 1, 0, (Threadblock(0, -1, 0, 0, ()),))
    with pytest.raises(SimError, match="1 sends but 0 receives"):
        simulate(Algo("x", "custom", "Simple", 1, 1, 2, False, (ir.gpus[0], gpu1)), line(2), [MiB])


def test_wrong_rank_count_is_rejected() -> None:
    with pytest.raises(SimError, match="4 GPUs but topology 'ring:8' has 8 ranks"):
        simulate(ring_allreduce_ir(4), ring(8), [MiB])


def test_bad_requests_are_collsynth_errors() -> None:
    ir = ring_allreduce_ir(4)
    with pytest.raises(CollsynthError, match="unknown data type"):
        simulate(ir, ring(4), [MiB], dtype="float7")
    with pytest.raises(CollsynthError, match="no sizes"):
        simulate(ir, ring(4), [])
    with pytest.raises(CollsynthError, match="max_exact_tiles"):
        SimModel(max_exact_tiles=1)
    bad_dep = Algo("bad", "custom", "Simple", 1, 1, 1, False, (Gpu(0, 1, 1, 0, (
        Threadblock(0, -1, -1, 0, (Step(0, "cpy", "i", 0, "o", 0, 1, depid=5, deps=0),)),)),))
    with pytest.raises(SimError, match="depends on tb 5"):
        simulate(bad_dep, Topology("one", 1, ()), [MiB])


def test_64_rank_1gb_point_is_fast_enough_to_run_in_tests() -> None:
    # the speed target (< 5 s) is measured in bench/sim.py; here: it runs and matches the closed form
    row = simulate(ring_allreduce_ir(64), ring(64), [1 << 30]).rows[0]
    assert row.time_us == pytest.approx(ring_closed_form(64, 1 << 30), rel=1e-9)


def test_a_plan_made_earlier_times_the_same_and_the_collector_comes_back():
    import gc

    from collsynth.sim import engine

    ir, topo = ring_allreduce_ir(8), ring(8)
    sizes = [1 << 10, 1 << 20, 1 << 30]  # one exact, one more, one extrapolated tile loop
    assert simulate(ir, topo, sizes, planned=engine.plan(ir, topo)).rows == simulate(ir, topo, sizes).rows
    assert gc.isenabled()  # the event loop pauses the cyclic collector only while it runs
    with pytest.raises(SimError, match="deadlocks"):
        simulate(deadlock_ir(), line(2), [MiB])
    assert gc.isenabled()


@pytest.mark.parametrize("make", [lambda: (ring_allreduce_ir(8), ring(8)), lambda: (fan_in_ir(), fully_connected(3))])
def test_a_run_stops_only_when_it_cannot_finish_before_stop_at(make):
    from collsynth.sim.engine import NotFaster

    ir, topo = make()
    size = 8 * MiB  # a few tiles: every one is simulated (no steady state), so a stop may apply
    exact = simulate(ir, topo, [size]).rows
    for stop_at in (exact[0].time_us * 1.000001, 2 * exact[0].time_us, math.inf):
        assert simulate(ir, topo, [size], stop_at=stop_at).rows == exact  # not stopped: the same run
    with pytest.raises(NotFaster):
        simulate(ir, topo, [size], stop_at=exact[0].time_us / 2)
