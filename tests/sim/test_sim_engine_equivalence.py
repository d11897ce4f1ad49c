"""The event loop reproduces the reference loop (tests/sim/engine_reference.py, main 42ea08b) bit for bit: the
makespan, every tile's end and every step's finish time, or the same verdict (NotFaster, deadlock), over random
plans (threadblocks, connections, dependencies, links, switches, local steps, FIFO depths, stop times) and over
the plans of compiled library programs."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.sim import engine
from collsynth.sim.engine import NotFaster, Plan, PlannedStep
from collsynth.sim.nccl import SimError
from tests.sim.engine_reference import reference_run

COSTS = {"local_alpha_us": 0.7, "local_beta_us_per_mb": 13.0, "reduce_beta_us_per_mb": 19.5}


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    """A plan as `engine.plan` makes them: each connection has one sending and one receiving threadblock, a
    threadblock sends on at most one connection (one link) and receives on at most one; steps may depend on any
    step of another threadblock or an earlier one of their own (deadlocks included)."""
    ntbs = draw(st.integers(1, 7))
    num_links = draw(st.integers(1, 4))
    lanes = tuple(draw(st.lists(st.integers(1, 2), max_size=2)))
    receivers = draw(st.permutations(range(ntbs)))
    senders = [g for g in range(ntbs) if draw(st.booleans())]
    connections = tuple((g, receivers[g], 0) for g in senders if receivers[g] != g)
    send_conn = {g: i for i, (g, _, _) in enumerate(connections)}
    recv_conn = {r: i for i, (_, r, _) in enumerate(connections)}
    lengths = [draw(st.integers(0, 5)) for _ in range(ntbs)]
    steps = []
    for g in range(ntbs):
        link = draw(st.integers(0, num_links - 1))
        switches = tuple(draw(st.sets(st.integers(0, len(lanes) - 1), max_size=len(lanes)))) if lanes else ()
        alpha = draw(st.sampled_from([0.0, 0.5, 1.25, 3.0]))
        beta = draw(st.sampled_from([0.0, 1.0, 7.5, 20.0]))
        tb = []
        for s in range(lengths[g]):
            dep_tb = draw(st.integers(-1, ntbs - 1))
            if dep_tb >= 0 and lengths[dep_tb] == 0 or dep_tb == g and s == 0:
                dep_tb = -1
            dep_step = draw(st.integers(0, (s if dep_tb == g else lengths[dep_tb]) - 1)) if dep_tb >= 0 else -1
            sends = g in send_conn and draw(st.booleans())
            receives = g in recv_conn and draw(st.booleans())
            local = not sends and not receives and draw(st.booleans())
            tb.append(PlannedStep(draw(st.integers(0, 3)), dep_tb, dep_step, recv_conn[g] if receives else -1,
                                  send_conn[g] if sends else -1, link if sends else -1,
                                  switches if sends else (), alpha if sends else 0.0, beta if sends else 0.0,
                                  local, local and draw(st.booleans())))
        steps.append(tuple(tb))
    return Plan(labels=tuple((g, 0) for g in range(ntbs)), steps=tuple(steps),
                step_labels=tuple(tuple(range(len(tb))) for tb in steps), connections=connections,
                num_links=num_links, switch_lanes=lanes)


def outcome(run, plan_: Plan, ntiles: int, slice_mb: float, fifo_slots: int | None, stop_at: float):  # type: ignore[no-untyped-def]
    """What a run gives: every finish time, or the kind of verdict."""
    try:
        result = run(plan_, slice_mb, ntiles, fifo_slots=fifo_slots, stop_at=stop_at, **COSTS)
    except NotFaster:
        return "not faster"
    except SimError:
        return "deadlock"
    return result.time_us, result.tile_end_us, tuple(tuple(ends) for ends in result.step_end_us)


def assert_same(plan_: Plan, ntiles: int, slice_mb: float, fifo_slots: int | None, stop_fraction: float) -> None:
    reference = outcome(reference_run, plan_, ntiles, slice_mb, fifo_slots, math.inf)
    stop_at = reference[0] * stop_fraction if isinstance(reference, tuple) and stop_fraction > 0 else math.inf
    if stop_at < math.inf:
        reference = outcome(reference_run, plan_, ntiles, slice_mb, fifo_slots, stop_at)
    assert outcome(engine._run, plan_, ntiles, slice_mb, fifo_slots, stop_at) == reference


@settings(max_examples=400, deadline=None)
@given(plan_=plans(), ntiles=st.integers(1, 5), slice_mb=st.sampled_from([0.0, 0.25, 1 / 3, 2.0]),
       fifo_slots=st.sampled_from([None, 1, 2, 8]), stop_fraction=st.sampled_from([0.0, 0.5, 0.99, 1.0, 1.5]))
def test_random_plans_run_as_the_reference_runs_them(plan_: Plan, ntiles: int, slice_mb: float,
                                                     fifo_slots: int | None, stop_fraction: float) -> None:
    assert_same(plan_, ntiles, slice_mb, fifo_slots, stop_fraction)


def test_the_generator_makes_runs_that_finish_and_runs_that_do_not() -> None:
    seen = set()

    @settings(max_examples=150, deadline=None)
    @given(plan_=plans(), fifo_slots=st.sampled_from([None, 1, 8]))
    def collect(plan_: Plan, fifo_slots: int | None) -> None:
        seen.add(type(outcome(reference_run, plan_, 3, 0.5, fifo_slots, math.inf)).__name__)

    collect()
    assert seen == {"tuple", "str"}


def test_the_generator_makes_connections_of_both_kinds() -> None:
    """Connections with as many receives as sends per tile (the loop reads arrivals and freed slots from the
    peer's finish times) and connections without (it reads them from mirror lists): both ways are covered."""
    seen = set()

    @settings(max_examples=150, deadline=None)
    @given(plan_=plans())
    def collect(plan_: Plan) -> None:
        layout = engine._layout(plan_)
        for conn in range(len(plan_.connections)):
            if layout.sends[conn] and layout.receives[conn]:
                seen.add("mirrored" if layout.widths[conn] else "matched")

    collect()
    assert seen == {"matched", "mirrored"}


@pytest.mark.parametrize("instances, protocol, fusion", [(1, "Simple", True), (2, "LL", False), (3, "LL128", True)])
def test_compiled_library_programs_run_as_the_reference_runs_them(instances: int, protocol: str, fusion: bool) -> None:
    from collsynth.topologies import resolve_topology
    from collsynth.tune import Evaluator
    from collsynth.tune.candidates import library_candidates
    from collsynth.tune.space import Config

    topo = resolve_topology("dgx1")
    candidates = library_candidates(topo, "allgather")
    evaluator = Evaluator(topo, candidates)
    checked = 0
    for candidate in candidates:
        config = Config(candidate.name, protocol, instances, fusion=fusion)
        planned = evaluator._plan(config, evaluator.ir(config))
        assert isinstance(planned, Plan)
        for ntiles, fifo_slots, stop_fraction in ((1, 8, 0.0), (6, 8, 0.0), (4, 1, 0.0), (5, 8, 0.9), (3, None, 0.0)):
            assert_same(planned, ntiles, 0.5, fifo_slots, stop_fraction)
            checked += 1
    assert checked >= 5
