"""`SynthesisResult`: what every synthesizer returns (DESIGN.md, "Algorithm"), and all the catalog reads.

    SynthesisResult(status, algorithms, bound, provenance, stages)

`algorithms` are verified schedules, best first (a Pareto sweep returns its frontier in order of steps);
`bound` is the proven lower bound on the objective the synthesizer optimised (its meaning is named in
`bound_kind`), or None; `stages` are the per-stage reports of a pipeline synthesizer (MILP, auto)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, is_dataclass
from typing import Any

from collsynth.core.enums import Status
from collsynth.schedule.algorithm import Algorithm


@dataclass(frozen=True)
class StageReport:
    """One stage of a synthesis pipeline: what it ran for, what it found, and why it stopped or was skipped."""

    name: str
    seconds: float
    outcome: str  # e.g. "improved 812.4 -> 790.1 us", "skipped: at the bound", "budget spent"
    objective: float | None = None  # the best objective after the stage (us for timed schedules)
    # solver stages (MILP): the solver's status (optimal | feasible | ... | skipped), its proven bound and
    # relative gap, the solver, the model's size (encodings' ModelSize), the objective's unit
    status: str = ""
    bound: float | None = None
    gap: float | None = None
    solver: str = ""
    size: Any = None
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
        if is_dataclass(self.size) and not isinstance(self.size, type):
            model = asdict(self.size)
            model["families"] = dict(model.get("families", ()))
            data["model"] = model
        return data


@dataclass(frozen=True)
class SynthesisResult:
    status: Status
    algorithms: tuple[Algorithm, ...]
    bound: float | None = None  # proven lower bound on the objective (see bound_kind), None if not known
    bound_kind: str = ""  # e.g. "steps", "rounds/chunk", "time_us"
    synthesizer: str = ""  # e.g. "sccl-instance", "sccl-pareto", "milp", "greedy", "trees", "hierarchical"
    seconds: float = 0.0
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)
    stages: tuple[StageReport, ...] = ()

    @property
    def algorithm(self) -> Algorithm | None:
        """The best algorithm, or None when none was found."""
        return self.algorithms[0] if self.algorithms else None

    @property
    def found(self) -> bool:
        return bool(self.algorithms)

    def __str__(self) -> str:
        bound = f", bound {self.bound:g} {self.bound_kind}".rstrip() if self.bound is not None else ""
        head = (f"{self.synthesizer or 'synthesis'}: {self.status}, {len(self.algorithms)} algorithm(s)"
                f"{bound}, {self.seconds:.2f} s")
        return "\n".join([head, *(f"  {stage}" for stage in self.stages)])
