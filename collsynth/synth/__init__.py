"""Synthesis: the `Algorithm` schedule IR, its verifier, and the search drivers.

SMT drivers (SCCL-style, z3): `synthesize_instance`, `least_steps`, `pareto_frontier` (reports:
`collsynth.synth.report`); they are loaded on first use, so importing `Algorithm` does not import z3.
"""

from __future__ import annotations

import importlib
from typing import Any

from collsynth.synth.algorithm import COPY, REDUCE, Algorithm, AlgorithmError, Send, Step
from collsynth.synth.verify import verify

_LAZY = {
    "synthesize_instance": "instance", "InstanceResult": "instance", "Attempt": "instance",
    "SynthesisError": "instance", "least_steps": "least_steps", "pareto_frontier": "pareto",
    "ParetoResult": "pareto", "ParetoPoint": "pareto", "SweepInterrupted": "pareto",
}

__all__ = ["COPY", "REDUCE", "Algorithm", "AlgorithmError", "Send", "Step", "verify", *sorted(_LAZY)]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"collsynth.synth.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'collsynth.synth' has no attribute {name!r}")
