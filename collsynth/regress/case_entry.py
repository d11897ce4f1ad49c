"""One entry of a regression suite run (suite.py builds them, model_gate.py checks them); a module of its own
so that both import it without importing each other."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from collsynth.catalog.plan import LIBRARY, CompileVariant


@dataclass(frozen=True)
class CaseEntry:
    """One entry of a suite run, keyed as in the baseline."""

    key: str
    topology: str
    collective: str
    name: str
    source: str
    variant: CompileVariant
    chunks: int | None
    steps: int | None
    rounds: int | None
    passed: bool
    message: str
    times_us: Mapping[int, float] = field(default_factory=dict)  # nccl-tests size -> predicted time
    busbw: Mapping[int, float] = field(default_factory=dict)
    tuned_us: Mapping[int, float] = field(default_factory=dict)  # nccl-tests size -> tuned time (collsynth.tune)
    port_steps: int | None = None  # the schedule's alphas once each switch port serializes its transfers

    @property
    def synthesized(self) -> bool:
        return self.source != LIBRARY

    def best_us(self, size: int) -> float:
        """What the entry would run at `size`: the faster of its compiled variant and its tuned configuration
        (tuning runs out-of-place, so in-place entries keep their variant's time)."""
        own = self.times_us[size]
        tuned = None if self.variant.inplace else self.tuned_us.get(size)
        return min(own, tuned) if tuned is not None else own

    @property
    def case(self) -> str:
        return f"{self.topology}/{self.collective}"
