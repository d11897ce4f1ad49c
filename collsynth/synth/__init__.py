"""Synthesis: the search drivers (the `Algorithm` schedule IR and its verifier are in `collsynth.schedule`).

SMT drivers (SCCL-style, z3): `synthesize_instance`, `least_steps`, `pareto_frontier` (reports:
`collsynth.synth.report`), over the `InstanceSolver` portfolio; each returns a `collsynth.schedule.SynthesisResult`.
They are loaded on first use, so importing this package does not import z3.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "synthesize_instance": "instance", "SynthesisError": "instance", "least_steps": "least_steps",
    "pareto_frontier": "pareto", "SweepInterrupted": "pareto", "InstanceSolver": "portfolio",
    "EncodingTooLarge": "size",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"collsynth.synth.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'collsynth.synth' has no attribute {name!r}")
