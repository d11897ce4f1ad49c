"""Protocols (Simple / LL / LL128) and the 8-slot connection FIFO of the simulator, against hand-computed times."""

from __future__ import annotations

import dataclasses

import pytest

from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.runtime.samples import ring_allreduce
from collsynth.sim import SimError, SimModel, simulate
from collsynth.topologies import Link, Topology, line, ring

MiB = 1 << 20
KiB = 1 << 10
ALPHA = 0.7  # the default NVLink link of the built-in topologies (the Simple protocol)
BETA = 46.0
# NCCL tuning.cc, Ring hwLat on NVLink (LL / LL128 / Simple) and the data fraction of a line
ALPHA_LL = ALPHA * 0.47 / 3.4
ALPHA_LL128 = ALPHA * 1.9 / 3.4
BETA_LL = BETA * 16 / 8
BETA_LL128 = BETA * 128 / 120
N = 8


def ring_time(proto: str, size: int) -> float:
    ir = dataclasses.replace(ring_allreduce(N), proto=proto)
    return simulate(ir, ring(N), [size]).rows[0].time_us


def test_simple_is_the_topology_alpha_beta() -> None:
    # 2(n-1) hops of one 2 MiB-or-smaller tile each: 14 * (0.7 + 46 * 1/8) = 90.3 us
    assert ring_time("Simple", MiB) == pytest.approx(90.3, rel=1e-12)


def test_ll_and_ll128_scale_alpha_and_beta() -> None:
    # 1 MiB over 8 ranks: 128 KiB chunks -> LL: 4 tiles of 32 KiB, LL128: 1 tile (576000 B)
    assert ring_time("LL", MiB) == pytest.approx(14 * (4 * ALPHA_LL + BETA_LL / 8), rel=1e-12)
    assert ring_time("LL128", MiB) == pytest.approx(14 * (ALPHA_LL128 + BETA_LL128 / 8), rel=1e-12)


def test_ll_wins_small_and_loses_large() -> None:
    small = {proto: ring_time(proto, 4 * KiB) for proto in ("Simple", "LL", "LL128")}
    large = {proto: ring_time(proto, 64 * MiB) for proto in ("Simple", "LL", "LL128")}
    assert small["LL"] < small["LL128"] < small["Simple"]
    assert large["Simple"] < large["LL128"] < large["LL"]
    assert large["LL"] > 1.9 * large["Simple"]  # half the data per line: about twice the time


def test_ll128_wins_in_between() -> None:
    # per hop LL128 saves 0.7*(1 - 1.9/3.4) = 0.309 us of alpha and loses 46/15 us/MB of beta: it beats
    # Simple below ~0.1 MB per chunk, and beats LL once LL's doubled beta outweighs its smaller alpha
    middle = {proto: ring_time(proto, 256 * KiB) for proto in ("Simple", "LL", "LL128")}
    assert min(middle, key=middle.get) == "LL128"


def test_link_class_picks_its_latency_row() -> None:
    ib = Topology("ib2", 2, (Link(0, 1, 1, 2.6, 105.0, "ib"), Link(1, 0, 1, 2.6, 105.0, "ib")))
    ir = _sends(1, proto="LL")
    time = simulate(ir, ib, [MiB], model=SimModel(tile_bytes=MiB)).rows[0].time_us
    assert time == pytest.approx(2.6 * 2.7 / 9.6 + 105.0 * 2, rel=1e-12)  # network row: LL 2.7, Simple 9.6


def test_unknown_protocol_is_rejected() -> None:
    with pytest.raises(SimError, match="unknown protocol 'LL64'"):
        simulate(dataclasses.replace(ring_allreduce(4), proto="LL64"), ring(4), [MiB])


def _sends(count: int, *, proto: str = "Simple", late_receiver: bool = False) -> Algo:
    """Rank 0 sends `count` one-chunk messages to rank 1 on one connection; rank 1 receives them in one tb,
    its first receive waiting (when `late_receiver`) for a local cpy on another tb."""
    sender = Threadblock(0, 1, -1, 0, tuple(Step(i, "s", "i", i, "o", i, 1) for i in range(count)))
    receives = tuple(Step(i, "r", "i", i, "o", i, 1, depid=0 if late_receiver and i == 0 else -1,
                          deps=0 if late_receiver and i == 0 else -1) for i in range(count))
    tbs = (Threadblock(0, -1, -1, 0, (Step(0, "cpy", "i", 0, "s", 0, 1, hasdep=True),)),) if late_receiver else ()
    receiver = Threadblock(len(tbs), -1, 0, 0, receives)
    return Algo(f"sends{count}", "custom", proto, 1, count, 2, False,
                (Gpu(0, count, count, 0, (sender,)), Gpu(1, count, count, 1, (*tbs, receiver))))


LATE_US = 1000.0  # the receiver's first receive waits for a cpy this long (local alpha, no beta)
HOP = ALPHA + BETA  # one 1 MiB message: 16 MiB in 16 chunks, one tile


def _late_time(slots: int | None) -> float:
    model = SimModel(local_alpha_us=LATE_US, local_beta_us_per_mb=0.0, fifo_slots=slots)
    return simulate(_sends(16, late_receiver=True), line(2), [16 * MiB], model=model).rows[0].time_us


def test_back_pressure_holds_the_sender_until_the_receiver_consumes() -> None:
    # unbounded: 16 sends arrive by 16 * 46.7 = 747.2 us < 1000 us, all consumed at 1000 us
    assert 16 * HOP < LATE_US
    assert _late_time(None) == pytest.approx(LATE_US, rel=1e-12)
    # 8 slots: sends 0-7 fill the FIFO; send 8 waits for receive 0 (at 1000 us), then sends 8-15 run
    # back to back (each frees the slot the next needs in time): 1000 + 8 * 46.7 us
    assert _late_time(8) == pytest.approx(LATE_US + 8 * HOP, rel=1e-12)
    assert _late_time(8) - _late_time(None) == pytest.approx(8 * HOP, rel=1e-12)
    assert SimModel().fifo_slots == 8


@pytest.mark.parametrize("slots", [1, 4, 15, 16, 32])
def test_back_pressure_delay_grows_with_the_messages_past_the_fifo(slots: int) -> None:
    assert _late_time(slots) == pytest.approx(LATE_US + max(0, 16 - slots) * HOP, rel=1e-12)


def test_prompt_receiver_is_not_slowed_by_the_fifo() -> None:
    ir = _sends(16)
    times = [simulate(ir, line(2), [16 * MiB], model=SimModel(fifo_slots=slots)).rows[0].time_us
             for slots in (None, 1, 8)]
    assert times == pytest.approx([16 * HOP] * 3, rel=1e-12)


def test_fifo_deadlock_names_the_full_connection() -> None:
    # rank 0 tb 0 sends 9 messages on channel 0; rank 1 only starts receiving them after a message on
    # channel 1, which rank 0 sends after its 9th send: fine with an unbounded FIFO, stuck with 8 slots
    nine = tuple(Step(i, "s", "i", 0, "o", 0, 1) for i in range(9))
    gpu0 = Gpu(0, 1, 1, 0, (Threadblock(0, 1, -1, 0, nine),
                            Threadblock(1, 1, -1, 1, (Step(0, "s", "i", 0, "o", 0, 1, depid=0, deps=8),))))
    receives = tuple(Step(i, "r", "i", 0, "o", 0, 1, depid=1 if i == 0 else -1, deps=0 if i == 0 else -1)
                     for i in range(9))
    gpu1 = Gpu(1, 1, 1, 0, (Threadblock(0, -1, 0, 0, receives),
                            Threadblock(1, -1, 0, 1, (Step(0, "r", "i", 0, "o", 0, 1, hasdep=True),))))
    ir = Algo("fifo_cycle", "custom", "Simple", 2, 1, 2, False, (gpu0, gpu1))
    assert simulate(ir, line(2), [MiB], model=SimModel(fifo_slots=None)).rows[0].time_us > 0
    with pytest.raises(SimError, match=r"gpu 0 tb 0 step 8 \(tile 0\) waits for a free FIFO slot to 1 on channel 0"):
        simulate(ir, line(2), [MiB])


def test_bad_fifo_slots_are_rejected() -> None:
    with pytest.raises(SimError, match="fifo_slots must be >= 1"):
        SimModel(fifo_slots=0)
