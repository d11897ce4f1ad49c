"""`SynthesisResult`: what every synthesizer returns (DESIGN.md, "Algorithm"), and all the catalog reads.

    SynthesisResult(status, algorithms, bound, provenance, stages)

`algorithms` are verified schedules, best first (a Pareto sweep returns its frontier in order of steps);
`bound` is the proven lower bound on the objective the synthesizer optimised (its meaning is named in
`bound_kind`), or None; `stages` are the per-stage reports of a pipeline synthesizer (MILP, auto).
Search-based synthesizers also list the solver questions they asked (`tried`, one `Attempt` each); a sweep
lists every point it found (`points`, dominated ones included; `frontier` keeps the Pareto-optimal ones)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.schedule.algorithm import Algorithm
from collsynth.topologies import Topology

# The status of one frontier point: fewer rounds proven impossible for its (C, S), or left open by a time-out.
OPTIMAL = "optimal"
FEASIBLE = "feasible"


@dataclass(frozen=True)
class ModelSize:
    """The size of a solver model (MILP/LP) a stage built: columns, rows, nonzeros, rows per family."""

    columns: int
    integer_columns: int
    rows: int
    nonzeros: int
    # rows per constraint family, in the order they were added
    families: tuple[tuple[str, int], ...] = ()

    def __str__(self) -> str:
        return (f"{self.columns} cols ({self.integer_columns} integer), {self.rows} rows, "
                f"{self.nonzeros} nonzeros")

    def to_dict(self) -> dict[str, Any]:
        return {"columns": self.columns, "integer_columns": self.integer_columns, "rows": self.rows,
                "nonzeros": self.nonzeros, "families": dict(self.families)}


@dataclass(frozen=True)
class StageReport:
    """One stage of a synthesis pipeline: what it ran for, what it found, and why it stopped or was skipped."""

    name: str
    seconds: float
    outcome: str  # e.g. "improved 812.4 -> 790.1 us", "skipped: at the bound", "budget spent"
    objective: float | None = None  # the best objective after the stage (us for timed schedules)
    # solver stages (MILP): the solver's status (optimal | feasible | ... | skipped), its proven bound and
    # relative gap, the solver, the size of the model it solved, the objective's unit
    status: str = ""
    bound: float | None = None
    gap: float | None = None
    solver: str = ""
    size: ModelSize | None = None
    note: str = ""
    unit: str = "us"
    budget_cut: bool = False  # the budget cut this stage short or skipped it

    def __str__(self) -> str:
        value = f" -> {self.objective:.3f}" if self.objective is not None else ""
        return f"{self.name}: {self.outcome} ({self.seconds:.2f} s){value}"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"stage": self.name, "seconds": round(self.seconds, 4),
                                "status": self.status or self.outcome, "solver": self.solver,
                                "objective": self.objective, "bound": self.bound, "unit": self.unit, "gap": self.gap,
                                "note": self.note, "budget_cut": self.budget_cut}
        if self.size is not None:
            data["model"] = self.size.to_dict()
        return data


@dataclass(frozen=True)
class Attempt:
    """One solver question: an algorithm with C chunks, S steps and at most `rounds` rounds?
    result: sat (then `rounds` is what the algorithm found uses), unsat or timeout."""

    chunks: int
    steps: int
    rounds: int
    result: Status
    seconds: float
    part: str | None = None  # AllReduce: which half ("reducescatter" / "allgather") or "direct"

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"chunks": self.chunks, "steps": self.steps, "rounds": self.rounds,
                                "result": str(self.result), "seconds": round(self.seconds, 3)}
        if self.part is not None:
            data["part"] = self.part
        return data


@dataclass(frozen=True)
class FrontierPoint:
    """An algorithm with C chunks, S steps and R rounds: the fewest R a sweep found for (C, S)."""

    chunks: int
    steps: int
    rounds: int
    status: str  # OPTIMAL or FEASIBLE
    algorithm: Algorithm | None = field(default=None, compare=False)
    seconds: float = field(default=0.0, compare=False)

    @property
    def rounds_per_chunk(self) -> Fraction:
        return Fraction(self.rounds, self.chunks)

    def dominates(self, other: FrontierPoint) -> bool:
        """At most as many steps and at most the R/C of `other`, one of them strictly fewer."""
        le = self.steps <= other.steps and self.rounds_per_chunk <= other.rounds_per_chunk
        return le and (self.steps < other.steps or self.rounds_per_chunk < other.rounds_per_chunk)

    def to_dict(self) -> dict[str, Any]:
        return {"chunks": self.chunks, "steps": self.steps, "rounds": self.rounds, "status": self.status}


def pareto_optimal(points: Iterable[FrontierPoint]) -> tuple[FrontierPoint, ...]:
    """The non-dominated points, by steps; of points with equal (S, R/C) the one with fewest chunks."""
    best: dict[tuple[int, Fraction], FrontierPoint] = {}
    for p in points:
        key = (p.steps, p.rounds_per_chunk)
        if key not in best or p.chunks < best[key].chunks:
            best[key] = p
    kept = [p for p in best.values() if not any(q.dominates(p) for q in best.values())]
    return tuple(sorted(kept, key=lambda p: (p.steps, p.rounds_per_chunk)))


@dataclass(frozen=True)
class SynthesisResult:
    status: Status
    algorithms: tuple[Algorithm, ...]
    # proven lower bound on the objective (see bound_kind), None if not known; exact (a Fraction) where it is one
    bound: float | Fraction | None = None
    bound_kind: str = ""  # e.g. "rounds", "rounds/chunk", "time_us"
    synthesizer: str = ""  # e.g. "sccl-instance", "sccl-pareto", "milp", "greedy", "trees", "hierarchical"
    seconds: float = 0.0
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    stages: tuple[StageReport, ...] = ()
    tried: tuple[Attempt, ...] = ()  # the solver questions asked, in order
    points: tuple[FrontierPoint, ...] = ()  # a sweep: every point found, dominated ones included
    steps_bound: int | None = None  # proven lower bound on the steps (SMT synthesizers), None if not known
    stopped: str = ""  # why a sweep ended (bound met, max chunks, time limit, interrupted)
    topology: Topology | None = field(default=None, compare=False)  # what was asked (reports name it)
    collective: Collective | None = field(default=None, compare=False)

    @property
    def algorithm(self) -> Algorithm | None:
        """The best algorithm, or None when none was found."""
        return self.algorithms[0] if self.algorithms else None

    @property
    def found(self) -> bool:
        return bool(self.algorithms)

    @property
    def frontier(self) -> tuple[FrontierPoint, ...]:
        """The Pareto-optimal points of a sweep (by steps)."""
        return pareto_optimal(self.points)

    @property
    def bound_met(self) -> bool:
        """A sweep: some point reaches the rounds-per-chunk lower bound (no point can beat it)."""
        return self.bound is not None and any(p.rounds_per_chunk <= self.bound for p in self.points)

    def __str__(self) -> str:
        bound = f", bound {self.bound:g} {self.bound_kind}".rstrip() if self.bound is not None else ""
        head = (f"{self.synthesizer or 'synthesis'}: {self.status}, {len(self.algorithms)} algorithm(s)"
                f"{bound}, {self.seconds:.2f} s")
        return "\n".join([head, *(f"  {stage}" for stage in self.stages)])
