"""`MilpResult`: the `SynthesisResult` of the MILP pipeline, with the figures its reports name.

It is a `SynthesisResult` (status, algorithms, bound in "time_us", synthesizer "milp", stages); the
properties read what the pipeline recorded in its provenance (predicted time, time limit, sizes)."""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from collsynth.schedule.algorithm import Algorithm
from collsynth.schedule.result import StageReport, SynthesisResult


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
        bound = self.bound
        if isinstance(bound, Fraction):  # the pipeline records a float; only exact synthesizers give Fractions
            return float(bound)
        return bound

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
        return summary(self)


class MilpInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run with a schedule in hand: `result` is that schedule, verified (status
    interrupted, its stages so far)."""

    def __init__(self, result: MilpResult) -> None:
        super().__init__("interrupted")
        self.result = result


def stage_line(stage: StageReport) -> str:
    """One stage as the summary prints it: name, status, seconds, objective, bound, gap, model, note."""
    parts = [f"{stage.name:<24} {stage.status or stage.outcome:<11} {stage.seconds:8.2f} s"]
    if stage.objective is not None:
        parts.append(f"obj {stage.objective:.3f} {stage.unit}")
    if stage.bound is not None:
        parts.append(f"bound {stage.bound:.3f} {stage.unit}")
    if stage.gap is not None:
        parts.append(f"gap {100 * stage.gap:.2f}%")
    if stage.size is not None:
        parts.append(f"[{stage.size}]")
    if stage.note:
        parts.append(f"({stage.note})")
    return "  ".join(parts)


def summary(result: MilpResult) -> str:
    algorithm = result.best
    lines = [f"{algorithm.name}: {algorithm.collective} on {algorithm.topology.name}, {result.size_bytes} B per "
             f"chunk before chunkup ({result.chunk_bytes:g} B per chunk), solver {result.solver}",
             f"sketch: {result.provenance.get('sketch_text', '')}"]
    lines += ["  " + stage_line(stage) for stage in result.stages]
    lb = f"{result.bound:.3f} us" if result.bound is not None else \
        "unknown (combining collectives: the routing stage bounds their AllGather/Broadcast half only)"
    gap = f"{100 * result.gap:.2f}%" if result.gap is not None else "unknown"
    lines.append(f"predicted time {result.predicted_us:.3f} us; lower bound {lb}; gap {gap}")
    if result.time_limit is not None:
        state = "time-limited: the budget cut a stage short" if result.time_limited else "no stage was cut short"
        lines.append(f"budget {result.time_limit:g} s for the whole run, {result.seconds:.2f} s used; {state}")
    return "\n".join(lines)
