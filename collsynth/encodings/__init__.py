"""Encodings of synthesis problems for solvers: the SCCL SMT encoding (z3, `sccl_z3`), lower bounds (HiGHS,
`bounds`) and the TACCL-style MILP (`taccl_milp`, `sketch`, `milp_*`).

Names are loaded on first use, so that importing one encoding does not import every solver.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "SCCLEncoding": "sccl_z3", "AllReduceEncoding": "sccl_allreduce", "InstanceOutcome": "sccl_z3",
    "EncodingError": "sccl_z3", "instance_symmetries": "sccl_z3", "reversed_topology": "sccl_z3",
    "lower_bound_steps": "bounds", "lower_bound_rounds_per_chunk": "bounds", "ImpossibleCollectiveError": "bounds",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"collsynth.encodings.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'collsynth.encodings' has no attribute {name!r}")
