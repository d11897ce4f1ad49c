"""`MilpResult`: the `SynthesisResult` of the MILP pipeline, with the figures its reports name.

It is a `SynthesisResult` (status, algorithms, bound in "time_us", synthesizer "milp", stages); the
properties read what the pipeline recorded in its provenance (predicted time, time limit, sizes)."""

from __future__ import annotations

from dataclasses import dataclass

from collsynth.schedule.algorithm import Algorithm
from collsynth.schedule.result import SynthesisResult


@dataclass(frozen=True)
class MilpResult(SynthesisResult):
    @property
    def best(self) -> Algorithm:
        """The schedule (a MILP run always returns one, or raises)."""
        return self.algorithms[0]

    @property
    def predicted_us(self) -> float:
        return float(self.provenance["predicted_us"])

    @property
    def lower_bound_us(self) -> float | None:
        return self.bound

    @property
    def gap(self) -> float | None:
        """(predicted - lower bound) / predicted: how far the schedule may be from the best in the sketch."""
        if self.bound is None or self.predicted_us <= 0:
            return None
        return max(0.0, (self.predicted_us - self.bound) / self.predicted_us)

    @property
    def solver(self) -> str:
        return str(self.provenance["solver"])

    @property
    def time_limit(self) -> float | None:
        return self.provenance.get("time_limit_s")

    @property
    def time_limited(self) -> bool:
        """The budget cut a stage short (a MILP stopped with an incumbent, or a search stopped early)."""
        return bool(self.provenance.get("time_limited", False))

    @property
    def size_bytes(self) -> int:
        return int(self.provenance["size_bytes"])

    @property
    def chunk_bytes(self) -> float:
        return float(self.provenance["chunk_bytes"])

    def summary(self) -> str:
        from collsynth.synth.milp.report import summary

        return summary(self)
