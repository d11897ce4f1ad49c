"""A run that goes on from a probe's state (engine.run keep_for/resume, collsynth.sim.snapshot) is the run from the
start, bit for bit: every finish time, or the same verdict (NotFaster, deadlock), on random plans with stop times
before and after the makespan; a probe is never stopped; and the ordering rule the resumed queue relies on (the
threadblock that went on is first at its time) is pinned by a plan where the other order differs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.sim import engine, snapshot
from collsynth.sim.engine import NotFaster, Plan, PlannedStep
from collsynth.sim.nccl import SimError
from tests.sim.engine_reference import reference_run
from tests.sim.test_sim_engine_equivalence import COSTS, outcome, plans


def resumed(plan_: Plan, shorter: int, ntiles: int, slice_mb: float, fifo_slots: int | None, stop_at: float):  # type: ignore[no-untyped-def]
    """The outcome of a run of `ntiles` that goes on from a probe of `shorter` tiles for it; None when the probe
    deadlocks or leaves no state (no threadblock has steps)."""
    try:
        probe = engine._run(plan_, slice_mb, shorter, fifo_slots=fifo_slots, stop_at=stop_at, keep_for=ntiles,
                            **COSTS)
    except SimError:
        return None
    if probe.snapshot is None:
        return None

    def go_on(plan_: Plan, slice_mb: float, ntiles: int, **kwargs):  # type: ignore[no-untyped-def]
        return engine._run(plan_, slice_mb, ntiles, resume=probe.snapshot, **kwargs)

    return outcome(go_on, plan_, ntiles, slice_mb, fifo_slots, stop_at)


def reference_with_stop(plan_: Plan, ntiles: int, slice_mb: float, fifo_slots: int | None,
                        stop_fraction: float) -> tuple[object, float]:
    reference = outcome(reference_run, plan_, ntiles, slice_mb, fifo_slots, math.inf)
    stop_at = reference[0] * stop_fraction if isinstance(reference, tuple) and stop_fraction > 0 else math.inf
    if stop_at < math.inf:
        reference = outcome(reference_run, plan_, ntiles, slice_mb, fifo_slots, stop_at)
    return reference, stop_at


@settings(max_examples=400, deadline=None)
@given(plan_=plans(), shorter=st.integers(1, 4), more=st.integers(1, 5), slice_mb=st.sampled_from([0.0, 0.25, 2.0]),
       fifo_slots=st.sampled_from([None, 1, 2, 8]), stop_fraction=st.sampled_from([0.0, 0.3, 0.7, 0.99, 1.0, 1.5]))
def test_a_run_resumed_is_the_run_from_the_start(plan_: Plan, shorter: int, more: int, slice_mb: float,
                                                 fifo_slots: int | None, stop_fraction: float) -> None:
    reference, stop_at = reference_with_stop(plan_, shorter + more, slice_mb, fifo_slots, stop_fraction)
    got = resumed(plan_, shorter, shorter + more, slice_mb, fifo_slots, stop_at)
    if got is not None:
        assert got == reference


@settings(max_examples=200, deadline=None)
@given(plan_=plans(), fifo_slots=st.sampled_from([None, 1, 8]), stop_fraction=st.sampled_from([0.0, 0.3, 1.0]))
def test_a_probe_is_the_short_run_and_is_never_stopped(plan_: Plan, fifo_slots: int | None,
                                                       stop_fraction: float) -> None:
    _, stop_at = reference_with_stop(plan_, 6, 0.5, fifo_slots, stop_fraction)

    def probe(plan_: Plan, slice_mb: float, ntiles: int, **kwargs):  # type: ignore[no-untyped-def]
        return engine._run(plan_, slice_mb, ntiles, keep_for=6, **kwargs)

    assert outcome(probe, plan_, 2, 0.5, fifo_slots, stop_at) == outcome(reference_run, plan_, 2, 0.5, fifo_slots,
                                                                         math.inf)


def test_the_generator_resumes_runs_that_finish_and_runs_that_stop() -> None:
    seen = set()

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(plan_=plans(), fifo_slots=st.sampled_from([None, 1, 8]), stop_fraction=st.sampled_from([0.0, 0.4]))
    def collect(plan_: Plan, fifo_slots: int | None, stop_fraction: float) -> None:
        _, stop_at = reference_with_stop(plan_, 6, 0.5, fifo_slots, stop_fraction)
        got = resumed(plan_, 2, 6, 0.5, fifo_slots, stop_at)
        if got is not None:
            seen.add(got if isinstance(got, str) else "finished")

    collect()
    assert {"finished", "not faster"} <= seen


def _one_sender() -> Plan:
    # one threadblock sending one chunk per tile on one link (1 us each) to a receiver
    send = PlannedStep(1, send_conn=0, link=0, alpha_us=1.0)
    return Plan(labels=((0, 0), (1, 0)), steps=((send,), (PlannedStep(1, recv_conn=0),)), step_labels=((0,), (0,)),
                connections=((0, 1, 0),), num_links=1, switch_lanes=())


def test_a_snapshot_goes_on_only_into_the_run_it_was_taken_for() -> None:
    plan_ = _one_sender()
    probe = engine._run(plan_, 1.0, 2, fifo_slots=8, stop_at=math.inf, keep_for=4, **COSTS)
    assert probe.snapshot is not None
    for ntiles, slice_mb, stop_at in ((2, 1.0, math.inf), (4, 2.0, math.inf), (4, 1.0, 3.5), (5, 1.0, 3.5)):
        with pytest.raises(ValueError):
            engine._run(plan_, slice_mb, ntiles, fifo_slots=8, stop_at=stop_at, resume=probe.snapshot, **COSTS)
    with pytest.raises(ValueError):
        engine._run(_one_sender(), 1.0, 4, fifo_slots=8, stop_at=math.inf, resume=probe.snapshot, **COSTS)
    assert engine._run(plan_, 1.0, 4, fifo_slots=8, stop_at=math.inf, resume=probe.snapshot, **COSTS).time_us == \
        engine._run(plan_, 1.0, 4, fifo_slots=8, stop_at=math.inf, **COSTS).time_us == 4.0


def test_a_stop_proved_inside_the_probe_stops_the_resumed_run_at_once() -> None:
    # the whole run takes 4 us; its bound reaches 3.5 us at the first send, inside the 2-tile probe
    plan_ = _one_sender()
    probe = engine._run(plan_, 0.0, 2, fifo_slots=8, stop_at=3.5, keep_for=4, **COSTS)
    assert probe.time_us == 2.0 and probe.snapshot is not None and probe.snapshot.proved == 4.0
    with pytest.raises(NotFaster, match="at least 4.0 us"):
        engine._run(plan_, 0.0, 4, fifo_slots=8, stop_at=3.5, resume=probe.snapshot, **COSTS)


def test_the_threadblock_that_went_on_is_first_at_its_time() -> None:
    """Queued last at its time instead (after the threadblocks already due then), the resumed run differs from
    the run from the start on this plan: which of two sends due together a link carries first changes."""
    plan_ = _queue_order_plan()
    reference = outcome(reference_run, plan_, 3, 0.25, 8, math.inf)
    assert resumed(plan_, 1, 3, 0.25, 8, math.inf) == reference

    def restore_last(snap: snapshot.Snapshot, ntiles: int, nsteps: list[int], widths: list[int]) -> snapshot.State:
        state = snapshot.restore(snap, ntiles, nsteps, widths)
        bucket = state[12][snap.t]
        bucket.append(bucket.pop(0))
        return state

    original = engine.restore
    engine.restore = restore_last
    try:
        assert resumed(plan_, 1, 3, 0.25, 8, math.inf) != reference
    finally:
        engine.restore = original


def _queue_order_plan() -> Plan:
    """Threadblocks A and H send on one link (1 us each); H's send waits for A's (a nop depends on it), so at
    t = 1 both are due, A first. The probe of 1 tile parts there (A has run its tile); in the longer run A sends
    at once (1 -> 2) and H after it (2 -> 3); queued after H, A would send second."""
    a_send = PlannedStep(0, send_conn=0, link=0, alpha_us=1.0)
    h_nop = PlannedStep(0, dep_tb=0, dep_step=0)
    h_send = PlannedStep(0, send_conn=1, link=0, alpha_us=1.0)
    return Plan(labels=((0, 0), (0, 1), (1, 0), (1, 1)),
                steps=((a_send,), (h_nop, h_send), (PlannedStep(0, recv_conn=0),), (PlannedStep(0, recv_conn=1),)),
                step_labels=((0,), (0, 1), (0,), (0,)), connections=((0, 1, 0), (0, 1, 1)), num_links=1,
                switch_lanes=())


def test_time_tiles_gives_the_times_it_gave_from_the_start() -> None:
    from collsynth.sim.simulate import SimModel, time_tiles
    from collsynth.topologies import resolve_topology
    from collsynth.tune import Evaluator
    from collsynth.tune.candidates import library_candidates
    from collsynth.tune.space import Config

    topo = resolve_topology("dgx1")
    model = SimModel(max_exact_tiles=4)
    checked = 0
    for coll in ("allgather", "reducescatter"):
        candidates = library_candidates(topo, coll)
        evaluator = Evaluator(topo, candidates)
        for candidate in candidates:
            config = Config(candidate.name, "Simple", 2)
            planned = evaluator._plan(config, evaluator.ir(config))
            assert isinstance(planned, Plan)
            for ntiles in (9, 13, 21):
                full = outcome(reference_run, planned, ntiles, 0.5, model.fifo_slots, math.inf)
                assert isinstance(full, tuple)
                for stop_at in (math.inf, full[0] * 0.5, full[0] * 1.01):
                    try:
                        got: object = time_tiles(planned, 0.5, ntiles, model, stop_at)
                    except NotFaster:
                        got = "not faster"
                    assert got == _time_tiles_from_the_start(planned, 0.5, ntiles, model, stop_at)
                    checked += 1
    assert checked >= 18


def _time_tiles_from_the_start(planned: Plan, slice_mb: float, ntiles: int, model, stop_at: float) -> object:  # type: ignore[no-untyped-def]
    """simulate.time_tiles as it was before probes were resumed (every run from the start; the reference loop)."""
    from collsynth.sim import steady

    def run(tiles: int, stop: float) -> engine.RunResult:
        return reference_run(planned, slice_mb, tiles, local_alpha_us=model.local_alpha_us,
                             local_beta_us_per_mb=model.local_beta_us_per_mb, fifo_slots=model.fifo_slots,
                             reduce_beta_us_per_mb=model.reduce_beta_us_per_mb, stop_at=stop)

    probe = ntiles if ntiles <= 2 * model.max_exact_tiles else model.max_exact_tiles
    while True:
        try:
            result = run(probe, stop_at if probe == ntiles else math.inf)
        except NotFaster:
            return "not faster"
        if probe == ntiles:
            return result.time_us, False
        state = steady.find_steady_state(planned, result, probe, model.fifo_slots)
        if state is not None:
            extra = (ntiles - probe) % state.tiles
            if extra:
                probe += extra
                result = run(probe, math.inf)
            return state.extrapolate(result, probe, ntiles), True
        probe = 2 * probe if ntiles - 2 * probe >= probe else ntiles
