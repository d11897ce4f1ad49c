"""The routing stages keep to their share of the budget: the greedy-routing stage checks the stage's clock
between routings and ordering rules, the group-patterns stage (greedy joins and join patterns over every
candidate schedule) between joins.

The clock is fake: it advances one "second" per schedule evaluation (the unit of work of the joins), so
the test counts work, not wall-clock time, and does not depend on the machine's speed."""

from __future__ import annotations

import pytest

import collsynth.synth.milp.ordering as ordering
import collsynth.synth.milp.route_stages as route_stages
from collsynth.collectives import make_collective
from collsynth.encodings.milp_instance import build_instance
from collsynth.encodings.milp_ordering import evaluate
from collsynth.encodings.sketch import sketch_from_taccl
from collsynth.synth.milp.parameters import DEFAULT_PARAMETERS, GREEDY_ROUTING, GROUP_PATTERNS
from collsynth.synth.milp.route_stages import RouteWork, greedy_routing, group_patterns
from collsynth.synth.milp.routing import heuristic_routes
from collsynth.synth.milp.runner import Clock, StageBudget
from collsynth.topologies.taccl import load_taccl_profile

NDV2_1MB = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
            "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
SK1_NDV2_N2 = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
               "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
               "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}


class WorkClock:
    """Fake time: one second per schedule evaluation."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def evaluate(self, *args, **kwargs):
        self.now += 1.0
        return evaluate(*args, **kwargs)


def _candidates() -> RouteWork:
    """NDv2 two nodes AllGather (64 KB chunks): the greedy routings' schedules, built without a budget."""
    sketch = sketch_from_taccl(SK1_NDV2_N2)
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    inst = build_instance(topo, make_collective("allgather", topo.num_ranks, sketch.chunkup), sketch, 64 << 10)
    work = RouteWork(inst, "highs", 1e-4, DEFAULT_PARAMETERS, Clock(0.0, None))
    greedy_routing(work, StageBudget(work.clock, 0.0, GREEDY_ROUTING))
    assert len(work.candidates) > 1 and inst.groupable and work.lower is None
    return work


def _group_patterns(monkeypatch: pytest.MonkeyPatch, total: float | None):
    """Run the stage on the candidates with a budget of `total` fake seconds; it keeps half of it."""
    work, clock = _candidates(), WorkClock()
    monkeypatch.setattr(ordering, "evaluate", clock.evaluate)
    budget = StageBudget(Clock(0.0, total, now=clock), 0.5, GROUP_PATTERNS)
    (report,) = group_patterns(work, budget).reports
    assert work.best is not None
    return work, clock, budget, report


def test_group_patterns_stops_at_its_deadline(monkeypatch):
    _, unlimited, _, report = _group_patterns(monkeypatch, None)
    assert not report.budget_cut and report.status == "heuristic"
    assert unlimited.now > 100  # enough work for the budget below to bind
    total = unlimited.now / 2  # the stage's deadline: a quarter of the work it does without a budget
    work, clock, budget, report = _group_patterns(monkeypatch, total)
    deadline = budget.deadline()
    assert deadline == total / 2
    # checked before every evaluation: past the deadline, at most the few evaluations of the best join
    # patterns found so far remain (pattern_joins keeps 4)
    assert deadline <= clock.now <= deadline + 6
    assert report.budget_cut and report.status == "stopped"
    # the schedule kept is a real one: its timing is what its orders evaluate to
    best = work.best
    assert evaluate(best.problem, best.orders).makespan == pytest.approx(best.timing.makespan)
    assert best in work.candidates or any(best.problem is c.problem for c in work.candidates)


class StageClock(WorkClock):
    """Fake time for the first stages: one second per schedule evaluation and per greedy routing."""

    def routes(self, *args, **kwargs):
        self.now += 1.0
        return heuristic_routes(*args, **kwargs)


def _greedy_stage(monkeypatch: pytest.MonkeyPatch, total: float | None):
    sketch = sketch_from_taccl(SK1_NDV2_N2)
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    inst = build_instance(topo, make_collective("allgather", topo.num_ranks, sketch.chunkup), sketch, 64 << 10)
    clock = StageClock()
    monkeypatch.setattr(ordering, "evaluate", clock.evaluate)
    monkeypatch.setattr(route_stages, "heuristic_routes", clock.routes)
    budget = StageBudget(Clock(0.0, total, now=clock), 0.5, GREEDY_ROUTING)
    work = RouteWork(inst, "highs", 1e-4, DEFAULT_PARAMETERS, budget.clock)
    (report,) = greedy_routing(work, budget).reports
    return work, clock, budget, report


def test_greedy_routing_stops_at_its_deadline_and_keeps_a_schedule(monkeypatch):
    full, unlimited, _, report = _greedy_stage(monkeypatch, None)
    assert not report.budget_cut and report.status == "heuristic"
    routings = len(full.candidates)
    assert routings == 5 and unlimited.now == routings * (1 + len(ordering.RULES))
    # the stage keeps half: a deadline inside the second routing's ordering rules (a routing costs 5)
    total = 2 * (5 + 1.5)
    work, clock, budget, report = _greedy_stage(monkeypatch, total)
    deadline = budget.deadline()
    # asked before every routing and rule but the first: past the deadline, nothing more is started
    assert deadline <= clock.now < deadline + 1
    assert report.budget_cut and report.status == "stopped" and "2 of 5 greedy routings" in report.note
    assert len(work.candidates) == 2
    for cand in work.candidates:  # each kept schedule is what its orders evaluate to
        assert evaluate(cand.problem, cand.orders).makespan == pytest.approx(cand.timing.makespan)


def test_a_spent_budget_still_gets_one_greedy_schedule(monkeypatch):
    work, clock, _, report = _greedy_stage(monkeypatch, 1e-9)
    assert clock.now == 2  # the first routing under the first rule: the pipeline needs a schedule
    assert len(work.candidates) == 1 and report.budget_cut and "1 of 5" in report.note
