"""The MILP pipeline's stage runner (collsynth/synth/milp/runner.py): skip rules, budget shares, rounds, reports.

Stages here are stand-ins on a tiny work record and the clock reads an injected time, so every rule is
checked exactly and nothing depends on the machine's speed."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from collsynth.schedule.result import StageReport
from collsynth.synth.milp.parameters import BUDGET_SPENT, DEFAULT_PARAMETERS, SKIPPED, MilpParameters
from collsynth.synth.milp.runner import Clock, Stage, StageBudget, StageOutcome, run_stages


@dataclass
class Work:
    incumbent: float | None
    lower: float | None
    ran: list[str] = field(default_factory=list)
    limits: list[float | None] = field(default_factory=list)


def improve_by(step: float, again: bool = False):
    def run(work: Work, budget: StageBudget) -> StageOutcome:
        work.ran.append(budget.name)
        work.limits.append(budget.solver_limit())
        assert work.incumbent is not None
        work.incumbent -= step
        return StageOutcome((StageReport(budget.name, 0.0, "heuristic", work.incumbent, status="heuristic"),),
                            again=again)
    return run


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def clock(total: float | None, now: FakeTime, grace: float = 0.0) -> Clock:
    return Clock(0.0, total, grace, DEFAULT_PARAMETERS.min_stage_seconds, now=now)


def test_stages_run_in_order_and_a_stage_at_the_bound_is_skipped_with_a_report():
    work = Work(incumbent=10.0, lower=8.0)
    stages = (Stage("a", improve_by(1.0), reserve=0.5, skip_at_bound=True),
              Stage("b", improve_by(1.0), reserve=0.5, skip_at_bound=True),
              Stage("c", improve_by(1.0), reserve=0.5, skip_at_bound=True, solver="highs"),
              Stage("d", improve_by(1.0), reserve=0.5))  # not skipped at the bound: it still runs
    reports: list[StageReport] = []
    run_stages(stages, work, clock(None, FakeTime()), DEFAULT_PARAMETERS, 1e-4, reports)
    assert work.ran == ["a", "b", "d"]
    assert [(r.name, r.status) for r in reports] == [("a", "heuristic"), ("b", "heuristic"), ("c", SKIPPED),
                                                     ("d", "heuristic")]
    skipped = reports[2]
    assert skipped.objective == 8.0 and skipped.bound == 8.0 and skipped.solver == "highs" and not skipped.budget_cut


def test_a_stage_that_does_not_apply_leaves_no_report():
    work = Work(incumbent=10.0, lower=None)
    stages = (Stage("a", improve_by(1.0), reserve=0.0, applies=lambda w: w.incumbent > 100),)
    reports: list[StageReport] = []
    run_stages(stages, work, clock(None, FakeTime()), DEFAULT_PARAMETERS, 1e-4, reports)
    assert work.ran == [] and reports == []


def test_the_budget_shares_and_the_spent_budget_rule():
    now = FakeTime()
    work = Work(incumbent=10.0, lower=None)
    stages = (Stage("early", improve_by(0.0), reserve=0.35),
              Stage("late", improve_by(0.0), reserve=0.1, skip_when_spent=True))
    reports: list[StageReport] = []
    now.now = 2.0  # of a 10 s budget: "early" may take what is left less 35%
    run_stages(stages, work, clock(10.0, now), DEFAULT_PARAMETERS, 1e-4, reports)
    assert work.limits == [pytest.approx(10.0 - 2.0 - 3.5), pytest.approx(10.0 - 2.0 - 1.0)]
    # with 1.2 s left and 1 s reserved, "late" cannot have min_stage_seconds: skipped, marked as cut
    work, reports = Work(incumbent=10.0, lower=None), []
    now.now = 8.8
    run_stages(stages, work, clock(10.0, now), DEFAULT_PARAMETERS, 1e-4, reports)
    assert work.ran == ["early"] and work.limits == [DEFAULT_PARAMETERS.min_stage_seconds]
    assert reports[-1].status == BUDGET_SPENT and reports[-1].budget_cut


def test_rounds_repeat_while_a_stage_asks_and_stop_at_the_bound():
    work = Work(incumbent=10.0, lower=None)
    reports: list[StageReport] = []
    stage = Stage("schedule", improve_by(1.0, again=True), reserve=0.0, skip_at_bound=True, rounds=3)
    run_stages((stage,), work, clock(None, FakeTime()), DEFAULT_PARAMETERS, 1e-4, reports)
    assert work.ran == ["schedule", "schedule (round 2)", "schedule (round 3)"] and work.incumbent == 7.0
    work, reports = Work(incumbent=10.0, lower=8.5), []
    run_stages((stage,), work, clock(None, FakeTime()), DEFAULT_PARAMETERS, 1e-4, reports)
    # after two rounds the schedule is at 8.0 <= the bound 8.5: the third round is skipped
    assert work.ran == ["schedule", "schedule (round 2)"] and reports[-1].status == SKIPPED


def test_parameters_name_the_search_size_rule():
    p = MilpParameters(search_tries_small=7, search_tries_medium=3, small_transfers=10, medium_transfers=20)
    assert [p.search_tries(n) for n in (10, 11, 20, 21)] == [7, 3, 3, 0]
    assert p.within_gap(100.0, 99.995, 1e-4) and not p.within_gap(100.0, 99.0, 1e-4)
    assert not p.within_gap(None, 1.0, 1.0) and not p.within_gap(1.0, None, 1.0)
