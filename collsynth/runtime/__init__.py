"""Running an IR: `execute(ir, backend="cpu"|"cuda", ...)` -> ExecutionResult (DESIGN.md, "Execution").

The CPU reference interpreter lives in cpu.py; the CUDA backend (collsynth.runtime.cuda) is imported
only when asked for, so nothing here needs a GPU. Both share the buffer layout, inputs and
postcondition check of layout.py and check.py, the element types and reduction arithmetic of
numerics.py (sum, prod, max, min on float32, float16, bfloat16, int32; the CPU also float64), and
return the same ExecutionResult.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collsynth.collectives.spec import Collective
from collsynth.ir import Algo
from collsynth.runtime.numerics import FORMATS, REDUCTION_OPS
from collsynth.runtime.result import ExecutionError, ExecutionResult

BACKENDS = ("cpu", "cuda")


def execute(ir: Algo, backend: str = "cpu", nbytes: int | None = None, dtype: str = "float32", seed: int = 0,
            collective: Collective | None = None, inputs: Sequence[np.ndarray] | None = None, op: str = "sum",
            **options: Any) -> ExecutionResult:
    """Run `ir` on `backend` with reduction `op` (sum, prod, max, min) and check the collective's postcondition
    (see cpu.execute_cpu for options)."""
    if backend == "cpu":
        from collsynth.runtime.cpu import execute_cpu

        return execute_cpu(ir, nbytes=nbytes, dtype=dtype, seed=seed, collective=collective, inputs=inputs, op=op,
                           **options)
    if backend == "cuda":
        try:
            from collsynth.runtime.cuda import execute_cuda
        except ModuleNotFoundError as exc:
            if exc.name not in ("collsynth.runtime.cuda", "collsynth.runtime.cuda.execute_cuda"):
                raise
            raise ExecutionError("the CUDA backend (collsynth.runtime.cuda) is not available in this install; use "
                                 "--backend cpu") from None
        return execute_cuda(ir, nbytes=nbytes, dtype=dtype, seed=seed, collective=collective, inputs=inputs, op=op,
                            **options)
    raise ExecutionError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")


__all__ = ["BACKENDS", "FORMATS", "REDUCTION_OPS", "ExecutionError", "ExecutionResult", "execute"]
