"""The schedule IR (DESIGN.md, `schedule/`): `Algorithm`, `verify`, the transforms, and `SynthesisResult`, which
every synthesizer returns and the catalog consumes."""

from __future__ import annotations

from collsynth.schedule.algorithm import COPY, REDUCE, Algorithm, AlgorithmError, Send, Step
from collsynth.schedule.result import (
    FEASIBLE,
    OPTIMAL,
    Attempt,
    FrontierPoint,
    StageReport,
    SynthesisResult,
    pareto_optimal,
)
from collsynth.schedule.transforms import concatenate, reversed_into_reduction, scaled
from collsynth.schedule.verify import verify

__all__ = ["COPY", "FEASIBLE", "OPTIMAL", "REDUCE", "Algorithm", "AlgorithmError", "Attempt", "FrontierPoint",
           "Send", "StageReport", "Step", "SynthesisResult", "concatenate", "pareto_optimal",
           "reversed_into_reduction", "scaled", "verify"]
