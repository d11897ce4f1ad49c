"""Element types and reduction operators of the CUDA kernel (codes, entry points).

The arithmetic itself (the bit-identical rule, bfloat16 rounding, the op table, inputs and reference
outputs) is shared with the CPU interpreter and lives in collsynth.runtime.numerics; its names are
re-exported here for the backend and its tests.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from collsynth.runtime.cuda.flatten import CudaBackendError
from collsynth.runtime.numerics import (
    FORMATS,
    REDUCTION_OPS,
    NumberFormat,
    as_values,
    bf16_to_float32,
    exact_inputs,
    float32_to_bf16,
    number_format,
    random_inputs,
    reducer,
    reference_outputs,
)
from collsynth.runtime.numerics import reduction_op as _reduction_op
from collsynth.runtime.result import ExecutionError


@dataclass(frozen=True)
class ElementType:
    """A number format the kernel supports, with its kernel constant and entry point suffix."""

    format: NumberFormat  # name, storage and arithmetic, shared with the CPU interpreter
    code: int  # kernel CS_DT_* constant
    suffix: str  # kernel entry point suffix

    @property
    def name(self) -> str:
        return self.format.name

    @property
    def storage(self) -> np.dtype:
        return self.format.storage

    @property
    def itemsize(self) -> int:
        return self.format.itemsize


DTYPES: Mapping[str, ElementType] = MappingProxyType({
    "float32": ElementType(FORMATS["float32"], 0, "f32"),
    "float16": ElementType(FORMATS["float16"], 1, "f16"),
    "bfloat16": ElementType(FORMATS["bfloat16"], 2, "bf16"),
    "int32": ElementType(FORMATS["int32"], 3, "i32"),
})
OPS = MappingProxyType({op: code for code, op in enumerate(REDUCTION_OPS)})  # kernel CS_OP_* constants


def element_type(name: str | np.dtype) -> ElementType:
    """A dtype (anything number_format accepts, aliases included) -> the kernel's ElementType."""
    try:
        key = number_format(name).name
    except ExecutionError:
        key = ""
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
