"""One runner for the MILP pipeline's stages: it owns the clock, the skip rules and the stage reports.

    run_stages(stages, work, clock, parameters, gap, reports)

A `Stage` is data: its name, the function that runs it, the share of the budget it leaves to the stages
after it, and when it is skipped. The rules, in order: a stage whose `applies` is false is left out
(no report); a `skip_at_bound` stage whose work is already within the gap of the proven lower bound
is skipped with a report; a `skip_when_spent` stage that cannot have `min_stage_seconds` of solver time
before its reserve is skipped with a report (the schedule in hand is kept). A stage may ask to run again
(`StageOutcome.again`, up to `rounds`), each round under the same rules."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from collsynth.core.signals import release_frames
from collsynth.schedule.result import StageReport
from collsynth.synth.milp.parameters import BUDGET_SPENT, SKIPPED, MilpParameters


@dataclass(frozen=True)
class Clock:
    """The wall-clock budget of one run: `total` seconds from `started` (as read from `now`), or none.
    `grace` is how late the solver may stop after its limit (CBC's process is stopped some seconds late).
    `now` is injectable so that tests need no real waiting."""

    started: float
    total: float | None
    grace: float = 0.0
    min_stage_seconds: float = 0.5
    now: Callable[[], float] = time.perf_counter

    def left(self) -> float | None:
        return None if self.total is None else self.total - (self.now() - self.started)

    def elapsed(self) -> float:
        return self.now() - self.started

    def deadline(self, reserve: float = 0.0) -> float | None:
        """The time (on `now`'s scale) by which a heuristic must stop to leave `reserve` x the budget."""
        return None if self.total is None else self.started + self.total * (1.0 - reserve)

    def share(self, reserve: float) -> float | None:
        """What a MILP stage may take before leaving `reserve` x the budget (None: no budget), less the grace."""
        left = self.left()
        if left is None or self.total is None:
            return None
        return left - reserve * self.total - self.grace

    def stage_limit(self, reserve: float) -> float | None:
        """The solver limit of a MILP stage that leaves `reserve` x the budget (at least min_stage_seconds)."""
        share = self.share(reserve)
        return None if share is None else max(self.min_stage_seconds, share)

    def spent(self, reserve: float) -> bool:
        """A MILP stage leaving `reserve` x the budget cannot have min_stage_seconds: skip it."""
        share = self.share(reserve)
        return share is not None and share < self.min_stage_seconds

    def past(self, deadline: float | None) -> bool:
        return deadline is not None and self.now() >= deadline


class Work(Protocol):
    """What the runner reads of a pipeline's state to apply its skip rules."""

    @property
    def incumbent(self) -> float | None:
        """The makespan of the best schedule in hand (us), if any."""

    @property
    def lower(self) -> float | None:
        """The best proven lower bound on every schedule the sketch allows (us), if any."""

    @property
    def in_hand(self) -> Any:
        """The best schedule so far (what an interrupted run keeps), if any."""


class StagesInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM while stages ran: the best schedule in hand then (None: none yet) and the proven bound."""

    def __init__(self, best: Any, lower: float | None) -> None:
        super().__init__("interrupted")
        self.best, self.lower = best, lower


W = TypeVar("W", bound=Work)


@dataclass(frozen=True)
class StageBudget:
    """What a running stage may use: the clock, its reserve, its name for this round, its round number."""

    clock: Clock
    reserve: float
    name: str
    round: int = 0

    def solver_limit(self) -> float | None:
        return self.clock.stage_limit(self.reserve)

    def deadline(self) -> float | None:
        return self.clock.deadline(self.reserve)

    def cut(self) -> bool:
        """The stage ran into its deadline: the `Stop` its searches ask between their steps."""
        return self.clock.past(self.deadline())

    def seconds_left(self) -> float | None:
        """Solver seconds left to the stage's deadline, less the solver's stop grace (may be <= 0; None: no
        budget): the `SecondsLeft` of a stage that solves several MILPs."""
        return self.clock.share(self.reserve)


@dataclass(frozen=True)
class StageOutcome:
    reports: tuple[StageReport, ...] = ()
    again: bool = False  # run another round (repeatable stages)


def always(_work: object) -> bool:
    return True


@dataclass(frozen=True)
class Stage(Generic[W]):
    """One stage of the pipeline, as data (module docstring)."""

    name: str
    run: Callable[[W, StageBudget], StageOutcome]
    reserve: float  # share of the whole budget kept for the stages after this one
    skip_at_bound: bool = False
    skip_when_spent: bool = False
    applies: Callable[[W], bool] = always
    rounds: int = 1
    solver: str = ""  # named in the reports the runner writes for a skipped stage


def run_stages(stages: Sequence[Stage[W]], work: W, clock: Clock, parameters: MilpParameters, gap: float,
               reports: list[StageReport]) -> None:
    """Run `stages` in order on `work` under the rules of the module docstring, appending their reports. An
    interrupt leaves as `StagesInterrupted` with what was in hand."""
    try:
        _run_each(stages, work, clock, parameters, gap, reports)
    except StagesInterrupted:
        raise
    except KeyboardInterrupt as stop:
        release_frames(stop)  # the cut-short solver frames go now, not with whoever keeps this
        raise StagesInterrupted(work.in_hand, work.lower) from stop


def _run_each(stages: Sequence[Stage[W]], work: W, clock: Clock, parameters: MilpParameters, gap: float,
              reports: list[StageReport]) -> None:
    for stage in stages:
        if not stage.applies(work):
            continue
        for round_ in range(stage.rounds):
            name = stage.name + (f" (round {round_ + 1})" if round_ else "")
            if stage.skip_at_bound and parameters.within_gap(work.incumbent, work.lower, gap):
                reports.append(_skipped(name, work, stage.solver, SKIPPED, False,
                                        "the schedule in hand is within the gap of the lower bound"))
                break
            if stage.skip_when_spent and clock.spent(stage.reserve):
                reports.append(_skipped(name, work, stage.solver, BUDGET_SPENT, True,
                                        "the budget is spent: the schedule in hand is kept"))
                break
            outcome = stage.run(work, StageBudget(clock, stage.reserve, name, round_))
            reports.extend(outcome.reports)
            if not outcome.again:
                break


def _skipped(name: str, work: Work, solver: str, status: str, budget_cut: bool, note: str) -> StageReport:
    return StageReport(name, 0.0, status, objective=work.incumbent, status=status, bound=work.lower, solver=solver,
                       note=note, budget_cut=budget_cut)
