"""The steady-state extrapolation of the tile loop equals simulating every tile, and never beats a port's bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_irs import ring_allreduce_ir

from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.sim import SimModel, engine, simulate
from collsynth.sim.simulate import busy_bound_us as simulator_bound
from collsynth.sim.simulate import time_tiles
from collsynth.topologies import Link, Switch, Topology, dgx2, fully_connected, ring

SLICE_MB = 0.5


def exchange_ir(n: int, messages: list[tuple[int, int, int]], deps: list[bool], *, proto: str = "Simple",
                name: str = "exchange") -> Algo:
    """One threadblock per (rank, peer): it sends to the peer and receives from it. Its steps follow the global
    order of `messages` (src, dst, cnt), which makes the program deadlock-free; where `deps[i]` is set, message
    i's send also waits for the sender's previous step of the global order on another threadblock (a chain
    through the rank's sends, like the timed port order)."""
    steps: dict[tuple[int, int], list[Step]] = {}
    last: dict[int, tuple[int, int]] = {}  # rank -> (peer, step index) of its latest step
    tb_ids: dict[tuple[int, int], int] = {}
    for src, dst in sorted({(a, b) for a, b, _ in messages} | {(b, a) for a, b, _ in messages}):
        tb_ids[(src, dst)] = sum(1 for key in tb_ids if key[0] == src)
    for (src, dst, cnt), dep in zip(messages, deps, strict=True):
        send_steps, recv_steps = steps.setdefault((src, dst), []), steps.setdefault((dst, src), [])
        depid = deps_s = -1
        if dep and src in last and last[src][0] != dst:
            depid, deps_s = tb_ids[(src, last[src][0])], last[src][1]
        send_steps.append(Step(len(send_steps), "s", "i", 0, "o", 0, cnt, depid, deps_s))
        recv_steps.append(Step(len(recv_steps), "r", "i", 0, "o", 0, cnt))
        last[src], last[dst] = (dst, len(send_steps) - 1), (src, len(recv_steps) - 1)
    gpus = []
    for r in range(n):
        tbs = []
        for (src, peer), tb_steps in sorted(steps.items()):
            if src == r:
                tb = tb_ids[(src, peer)]
                tbs.append(Threadblock(tb, peer, peer, 0, tuple(sorted(tb_steps, key=lambda s: s.s))))
        gpus.append(Gpu(r, 1, 1, 0, tuple(sorted(tbs, key=lambda t: t.id))))
    return Algo(name, "custom", proto, 1, 1, n, False, tuple(gpus))


def one_step_allgather_ir(n: int, *, rotated: bool, proto: str = "Simple") -> Algo:
    """Every rank sends its chunk to every peer, one threadblock per peer, its sends chained through the rank's
    one switch port: ascending peer order (every rank targets rank 0 first) or rotated (r+1, r+2, ...)."""
    messages = []
    for k in range(1, n):
        for r in range(n):
            messages.append((r, (r + k) % n if rotated else (k - 1 if k - 1 < r else k), 1))
    return exchange_ir(n, messages, [True] * len(messages), proto=proto, name=f"ag{n}{'-rot' if rotated else ''}")


def switched(n: int) -> Topology:
    """n ranks behind a switch: every pair linked, one lane out of and one into each rank (DGX-2-like)."""
    links = tuple(Link(a, b, 1, 0.7, 8.0) for a in range(n) for b in range(n) if a != b)
    ports = [Switch(f"out{r}", frozenset((r, p) for p in range(n) if p != r), 1, 8.0) for r in range(n)]
    ports += [Switch(f"in{r}", frozenset((p, r) for p in range(n) if p != r), 1, 8.0) for r in range(n)]
    return Topology(f"switched{n}", n, links, tuple(ports))


def busy_bound_us(planned: engine.Plan, topology: Topology, ntiles: int) -> float:
    """Each link and each switch lane is busy for the transfers it carries: the makespan is at least the busiest
    link's total, and a switch's total over its lanes."""
    link_busy = [0.0] * planned.num_links
    switch_busy = [0.0] * len(planned.switch_lanes)
    for tb in planned.steps:
        for step in tb:
            if step.send_conn >= 0:
                duration = ntiles * (step.alpha_us + step.cnt * SLICE_MB * step.beta_us_per_mb)
                link_busy[step.link] += duration
                for sw in step.switches:
                    switch_busy[sw] += duration
    return max(link_busy + [busy / lanes for busy, lanes in zip(switch_busy, planned.switch_lanes, strict=True)])


def extrapolated_and_exact(ir: Algo, topology: Topology, ntiles: int, probe: int = 16) -> tuple[float, float, bool]:
    planned = engine.plan(ir, topology)
    approx, extrapolated = time_tiles(planned, SLICE_MB, ntiles, SimModel(max_exact_tiles=probe))
    exact, _ = time_tiles(planned, SLICE_MB, ntiles, SimModel(max_exact_tiles=ntiles))
    return approx, exact, extrapolated


@pytest.mark.parametrize("rotated", [False, True])
@pytest.mark.parametrize("ntiles", [64, 101, 256])
def test_switch_allgather_extrapolation_is_exact_and_above_the_port_bound(rotated: bool, ntiles: int) -> None:
    # the case the old "average spacing of tiles 8..15" undershot: DGX-2, one threadblock per peer, the sends
    # chained through the port; it gave less than the port's bandwidth bound
    topology = dgx2()
    ir = one_step_allgather_ir(16, rotated=rotated)
    approx, exact, extrapolated = extrapolated_and_exact(ir, topology, ntiles)
    assert approx == pytest.approx(exact, rel=1e-9)
    assert approx >= busy_bound_us(engine.plan(ir, topology), topology, ntiles) * (1 - 1e-12)
    assert extrapolated or not rotated  # the rotated order settles: the long runs take the shortcut


@pytest.mark.parametrize("ir, topology", [
    (ring_allreduce_ir(8, proto="LL"), ring(8)),
    (one_step_allgather_ir(6, rotated=False, proto="LL128"), fully_connected(6)),
])
def test_extrapolation_matches_exact_at_many_tiles(ir: Algo, topology: Topology) -> None:
    for ntiles in (64, 129, 200):
        approx, exact, _ = extrapolated_and_exact(ir, topology, ntiles)
        assert approx == pytest.approx(exact, rel=1e-9)


@settings(max_examples=25, deadline=None)
@given(data=st.data(), n=st.integers(2, 5), ntiles=st.integers(17, 90), probe=st.sampled_from([2, 8, 16]))
def test_extrapolation_equals_exact_for_random_programs(data: st.DataObject, n: int, ntiles: int, probe: int) -> None:
    pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    messages = data.draw(st.lists(st.tuples(st.sampled_from(pairs), st.integers(1, 3)), min_size=1, max_size=12))
    deps = data.draw(st.lists(st.booleans(), min_size=len(messages), max_size=len(messages)))
    ir = exchange_ir(n, [(a, b, cnt) for (a, b), cnt in messages], deps,
                     proto=data.draw(st.sampled_from(["Simple", "LL"])))
    topology = data.draw(st.sampled_from([fully_connected(n), switched(n)]))
    approx, exact, _ = extrapolated_and_exact(ir, topology, ntiles, probe)
    assert approx == pytest.approx(exact, rel=1e-9)
    assert approx >= busy_bound_us(engine.plan(ir, topology), topology, ntiles) * (1 - 1e-12)


@pytest.mark.parametrize("proto", ["Simple", "LL", "LL128"])
def test_busy_bound_is_the_busiest_resource_and_below_the_simulated_time(proto: str) -> None:
    topology = dgx2()
    ir = one_step_allgather_ir(16, rotated=True, proto=proto)
    size = 1 << 30  # 1GB AllGather on 16 ranks: 64 MiB chunks
    result = simulate(ir, topology, [size])
    ntiles = result.tiles[0]
    planned = engine.plan(ir, topology)
    expected = simulator_bound(ir, topology, size)
    slice_mb = result.rows[0].size_bytes / ir.nchunksperloop / ntiles / (1 << 20)
    assert expected == pytest.approx(_bound_at(planned, ntiles, slice_mb), rel=1e-9)
    assert expected <= result.rows[0].time_us * (1 + 1e-12)


def _bound_at(planned: engine.Plan, ntiles: int, slice_mb: float) -> float:
    busy = [0.0] * planned.num_links
    switch_busy = [0.0] * len(planned.switch_lanes)
    for tb in planned.steps:
        for step in tb:
            if step.send_conn >= 0:
                duration = ntiles * (step.alpha_us + step.cnt * slice_mb * step.beta_us_per_mb)
                busy[step.link] += duration
                for sw in step.switches:
                    switch_busy[sw] += duration
    return max(busy + [b / lanes for b, lanes in zip(switch_busy, planned.switch_lanes, strict=True)])
