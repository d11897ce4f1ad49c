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
from collsynth.schedule.transforms import TimedSends, concatenate, reversed_into_reduction, reversed_sends, scaled
from collsynth.schedule.verify import verify

__all__ = ["COPY", "FEASIBLE", "OPTIMAL", "REDUCE", "Algorithm", "AlgorithmError", "Attempt", "FrontierPoint",
           "Send", "StageReport", "Step", "SynthesisResult", "TimedSends", "concatenate", "pareto_optimal",
           "reversed_into_reduction", "reversed_sends", "scaled", "verify"]
