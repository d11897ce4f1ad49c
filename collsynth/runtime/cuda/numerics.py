"""Element types and reduction operators of the CUDA kernel (codes, entry points).

The arithmetic itself (the bit-identical rule, bfloat16 rounding, the op table, inputs and reference
outputs) is shared with the CPU interpreter and lives in collsynth.runtime.numerics; its names are
re-exported here for the backend and its tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from collsynth.runtime.cuda.flatten import CudaBackendError
from collsynth.runtime.numerics import (
    DTYPE_ALIASES,
    REDUCTION_OPS,
    as_values,
    bf16_to_float32,
    exact_inputs,
    float32_to_bf16,
    random_inputs,
    reducer,
    reference_outputs,
)
from collsynth.runtime.numerics import reduction_op as _reduction_op
from collsynth.runtime.result import ExecutionError


@dataclass(frozen=True)
class ElementType:
    name: str  # canonical: float32, float16, bfloat16, int32
    code: int  # kernel CS_DT_* constant
    storage: np.dtype  # numpy dtype of the stored bits
    suffix: str  # kernel entry point suffix

    @property
    def itemsize(self) -> int:
        return int(self.storage.itemsize)


DTYPES = MappingProxyType({
    "float32": ElementType("float32", 0, np.dtype(np.float32), "f32"),
    "float16": ElementType("float16", 1, np.dtype(np.float16), "f16"),
    "bfloat16": ElementType("bfloat16", 2, np.dtype(np.uint16), "bf16"),
    "int32": ElementType("int32", 3, np.dtype(np.int32), "i32"),
})
OPS = MappingProxyType({op: code for code, op in enumerate(REDUCTION_OPS)})  # kernel CS_OP_* constants


def element_type(name: str | np.dtype) -> ElementType:
    key = str(np.dtype(name)) if isinstance(name, np.dtype) else str(name).lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise CudaBackendError(f"dtype {name!r} is not supported by the CUDA backend; use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def reduction_op(name: str) -> str:
    try:
        return _reduction_op(name)
    except ExecutionError as exc:
        raise CudaBackendError(str(exc)) from None


def kernel_name(dtype: ElementType, op: str) -> str:
    return f"collsynth_interp_{dtype.suffix}_{op}"


def all_kernel_names() -> list[str]:
    return [kernel_name(dt, op) for dt in DTYPES.values() for op in OPS]


__all__ = [
    "DTYPES", "OPS", "ElementType", "all_kernel_names", "as_values", "bf16_to_float32", "element_type", "exact_inputs",
    "float32_to_bf16", "kernel_name", "random_inputs", "reducer", "reduction_op", "reference_outputs",
]
