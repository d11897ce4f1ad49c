"""Element types and reduction operators of the CUDA backend, and their exact numpy counterparts.

Bit-identical rule (shared with the CPU interpreter): a reducing step computes `received OP local`
element by element, once per step, in step order. IEEE addition and multiplication are commutative,
so only the association order matters, and that is fixed by the IR's step order for both backends.
Half types are computed in float32 and rounded to nearest-even once per operation; because float32
keeps more than 2p+2 bits of a p-bit half (p = 11 for float16, 8 for bfloat16), this equals the
correctly rounded half operation, which is what numpy's float16 arithmetic gives. int32 sum and
prod wrap around modulo 2**32 on both sides. bfloat16 (absent from numpy) is stored as uint16 bits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from collsynth.runtime.cuda.flatten import CudaBackendError


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
_DTYPE_ALIASES = MappingProxyType({"fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16",
                                   "f16": "float16", "half": "float16", "bf16": "bfloat16", "int": "int32",
                                   "i32": "int32"})
OPS = MappingProxyType({"sum": 0, "prod": 1, "max": 2, "min": 3})


def element_type(name: str | np.dtype) -> ElementType:
    key = str(np.dtype(name)) if isinstance(name, np.dtype) else str(name).lower()
    key = _DTYPE_ALIASES.get(key, key)
    if key not in DTYPES:
        raise CudaBackendError(f"dtype {name!r} is not supported by the CUDA backend; use one of {', '.join(DTYPES)}")
    return DTYPES[key]


def reduction_op(name: str) -> str:
    key = str(name).lower()
    if key not in OPS:
        raise CudaBackendError(f"reduction op {name!r} is not supported; use one of {', '.join(OPS)}")
    return key


def kernel_name(dtype: ElementType, op: str) -> str:
    return f"collsynth_interp_{dtype.suffix}_{op}"


def all_kernel_names() -> list[str]:
    return [kernel_name(dt, op) for dt in DTYPES.values() for op in OPS]


# --- bfloat16 as uint16 bits ------------------------------------------------------------------------------

def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bits, nearest-even (NaN stays a quiet NaN), as the kernel does."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def _maximum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum(a, b)


def _minimum(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(a, b)


_FLOAT_OPS: Mapping[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = MappingProxyType({
    "sum": np.add, "prod": np.multiply, "max": _maximum, "min": _minimum})


def reducer(dtype: ElementType, op: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`f(received, local)` on stored bits, exactly as the kernel computes it."""
    fn = _FLOAT_OPS[reduction_op(op)]
    if dtype.name == "bfloat16":
        return lambda a, b: float32_to_bf16(fn(bf16_to_float32(a), bf16_to_float32(b)))
    if dtype.name == "int32" and op in ("sum", "prod"):
        return lambda a, b: fn(a.view(np.uint32), b.view(np.uint32)).view(np.int32)
    return lambda a, b: fn(a, b)


def random_inputs(dtype: ElementType, shapes: list[tuple[int, int]], seed: int) -> list[np.ndarray]:
    """Per-rank random inputs (stored bits): small integers for int32, values in [-1, 1) for floats."""
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        if dtype.name == "int32":
            out.append(rng.integers(-1000, 1000, size=shape, dtype=np.int32))
        elif dtype.name == "bfloat16":
            out.append(float32_to_bf16(rng.uniform(-1, 1, size=shape).astype(np.float32)))
        else:
            out.append(rng.uniform(-1, 1, size=shape).astype(dtype.storage))
    return out


def as_values(dtype: ElementType, bits: np.ndarray) -> np.ndarray:
    """Stored bits -> numbers numpy can compare (bfloat16 widened to float32)."""
    return bf16_to_float32(bits) if dtype.name == "bfloat16" else np.asarray(bits)


def exact_inputs(dtype: ElementType, ngpus: int, shape: tuple[int, int], seed: int) -> list[np.ndarray]:
    """Random inputs whose sums over up to `ngpus` ranks are exact in `dtype` whatever the order (small multiples
    of a power of two, as collsynth.runtime.layout.make_inputs does), for dtypes numpy lacks (bfloat16)."""
    rng = np.random.default_rng(seed)
    mantissa = 8 if dtype.name == "bfloat16" else int(np.finfo(dtype.storage).nmant) + 1
    bits = max(1, min(12, mantissa - 1 - int(np.ceil(np.log2(max(1, ngpus))))))
    scale = np.float32(2.0 ** -min(6, bits))
    out = []
    for _ in range(max(1, ngpus)):
        values = rng.integers(-(1 << bits), (1 << bits) + 1, size=shape).astype(np.float32) * scale
        out.append(float32_to_bf16(values) if dtype.name == "bfloat16" else values.astype(dtype.storage))
    return out


def reference_outputs(collective, inputs: list[np.ndarray], op: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Collective.reference_outputs for any op: per rank (expected, checked), contributions combined in rank order
    (`inputs` are numbers, bfloat16 already widened to float32)."""
    fn = _FLOAT_OPS[reduction_op(op)]
    elems = inputs[0].shape[1]
    values = []
    for c in range(collective.num_chunks):
        ranks = sorted(collective.pre[c])
        acc = inputs[ranks[0]][collective.input_index(c, ranks[0])].copy()
        if collective.combining:
            for r in ranks[1:]:
                acc = fn(acc, inputs[r][collective.input_index(c, r)])
        values.append(acc)
    result = [(np.zeros((collective.output_chunks, elems), dtype=inputs[0].dtype),
               np.zeros(collective.output_chunks, dtype=bool)) for _ in range(collective.num_ranks)]
    for c, r, i in collective.outputs:
        result[r][0][i] = values[c]
        result[r][1][i] = True
    return result
