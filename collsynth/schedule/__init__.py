"""The schedule IR (DESIGN.md, `schedule/`): `Algorithm`, `verify`, the transforms, and `SynthesisResult`, which
every synthesizer returns and the catalog consumes."""

from __future__ import annotations

from collsynth.schedule.algorithm import COPY, REDUCE, Algorithm, AlgorithmError, Send, Step
from collsynth.schedule.result import StageReport, SynthesisResult
from collsynth.schedule.verify import verify

__all__ = ["COPY", "REDUCE", "Algorithm", "AlgorithmError", "Send", "StageReport", "Step", "SynthesisResult",
           "verify"]
