"""Element types and reduction operators of every backend, and their exact numpy arithmetic.

Bit-identical rule (the CPU interpreter, the CUDA kernel and its numpy model all follow it): a reducing
step computes `received OP local` element by element, once per step, in step order. IEEE addition and
multiplication are commutative, so only the association order matters, and that is fixed by the IR's
step order. Half types are computed in float32 and rounded to nearest-even once per operation; because
float32 keeps more than 2p+2 bits of a p-bit half (p = 11 for float16, 8 for bfloat16), this equals the
correctly rounded half operation, which is what numpy's float16 arithmetic gives. int32 sum and prod
wrap around modulo 2**32. bfloat16 (absent from numpy) is stored as uint16 bits; `as_values` widens it.

Generated inputs make every reduction exact whatever the order (`exact_inputs` for sum, max and min,
`exact_product_inputs` for prod), so outputs can be compared with the reference bit for bit.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from collsynth.runtime.result import ExecutionError

REDUCTION_OPS = ("sum", "prod", "max", "min")  # NCCL's ncclSum, ncclProd, ncclMax, ncclMin
OP_NOUNS = MappingProxyType({"sum": "sum", "prod": "product", "max": "maximum", "min": "minimum"})


@dataclass(frozen=True)
class NumberFormat:
    """An element type as the backends store it: bfloat16 lives in uint16 storage."""

    name: str  # canonical: float32, float16, bfloat16, float64, int32
    storage: np.dtype  # numpy dtype of the stored bits

    @property
    def itemsize(self) -> int:
        return int(self.storage.itemsize)

    @property
    def is_float(self) -> bool:
        return self.name != "int32"

    @property
    def mantissa(self) -> int:
        """Significand bits including the implicit one (0 for integers)."""
        if self.name == "bfloat16":
            return 8
        return int(np.finfo(self.storage).nmant) + 1 if self.is_float else 0

    @property
    def eps(self) -> float:
        """Distance from 1 to the next representable value (0 for integers)."""
        return 2.0 ** (1 - self.mantissa) if self.is_float else 0.0

    @property
    def value_dtype(self) -> np.dtype:
        """The numpy dtype of `as_values` (what the stored bits mean as numbers)."""
        return np.dtype(np.float32) if self.name == "bfloat16" else self.storage


FORMATS: Mapping[str, NumberFormat] = MappingProxyType({
    "float32": NumberFormat("float32", np.dtype(np.float32)),
    "float16": NumberFormat("float16", np.dtype(np.float16)),
    "bfloat16": NumberFormat("bfloat16", np.dtype(np.uint16)),
    "float64": NumberFormat("float64", np.dtype(np.float64)),
    "int32": NumberFormat("int32", np.dtype(np.int32)),
})
DTYPE_ALIASES: Mapping[str, str] = MappingProxyType({
    "fp32": "float32", "f32": "float32", "float": "float32", "fp16": "float16", "f16": "float16", "half": "float16",
    "bf16": "bfloat16", "fp64": "float64", "f64": "float64", "double": "float64", "int": "int32", "i32": "int32"})


def number_format(dtype: Any) -> NumberFormat:
    """A dtype name (aliases such as bf16, fp16 accepted), numpy dtype or anything with a `.name` -> NumberFormat."""
    if isinstance(dtype, NumberFormat):
        return dtype
    if isinstance(dtype, str):
        key = dtype.lower()
    elif isinstance(dtype, (np.dtype, type)):
        try:
            key = np.dtype(dtype).name
        except TypeError:
            key = getattr(dtype, "__name__", repr(dtype))
    else:
        key = str(getattr(dtype, "name", dtype)).lower()
    key = DTYPE_ALIASES.get(key, key)
    if key not in FORMATS:
        raise ExecutionError(f"dtype {key!r} is not supported; use one of {', '.join(FORMATS)}")
    return FORMATS[key]


def reduction_op(name: str) -> str:
    """Canonical reduction op name, or ExecutionError naming the choices."""
    key = str(name).lower()
    if key not in REDUCTION_OPS:
        raise ExecutionError(f"reduction op {name!r} is not supported; use one of {', '.join(REDUCTION_OPS)}")
    return key


# --- bfloat16 as uint16 bits ------------------------------------------------------------------------------

def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 to bfloat16 bits, nearest-even (NaN stays a quiet NaN), as the kernel does."""
    u = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), rounded)


def as_values(dtype: Any, bits: np.ndarray) -> np.ndarray:
    """Stored bits -> numbers numpy can compare (bfloat16 widened to float32)."""
    return bf16_to_float32(bits) if number_format(dtype).name == "bfloat16" else np.asarray(bits)


def to_storage(dtype: Any, values: np.ndarray) -> np.ndarray:
    """User inputs as stored bits: bfloat16 given as numbers is rounded to bfloat16, given as uint16 taken as bits;
    other types are returned as given (the caller casts them)."""
    array = np.asarray(values)
    if number_format(dtype).name == "bfloat16" and array.dtype.kind == "f":
        return float32_to_bf16(array.astype(np.float32))
    return array


# --- the operators --------------------------------------------------------------------------------------

_UFUNCS: Mapping[str, np.ufunc] = MappingProxyType({
    "sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum})


def number_op(op: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """The operator on numbers in their own numpy dtype (no extra rounding step)."""
    return _UFUNCS[reduction_op(op)]


def reducer(dtype: Any, op: str) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """`f(received, local)` on stored bits, exactly as the kernel computes it."""
    fmt, fn = number_format(dtype), number_op(op)
    if fmt.name == "bfloat16":
        return lambda a, b: float32_to_bf16(fn(bf16_to_float32(a), bf16_to_float32(b)))
    if fmt.name == "int32" and op in ("sum", "prod"):
        return lambda a, b: fn(a.view(np.uint32), b.view(np.uint32)).view(np.int32)
    return lambda a, b: fn(a, b)


def reducer_into(dtype: Any, op: str) -> Callable[[np.ndarray, np.ndarray, np.ndarray], None]:
    """`f(received, local, out)`: `reducer` written into `out` (which may alias an operand), without a temporary
    where numpy can compute in place."""
    fmt, key = number_format(dtype), reduction_op(op)
    ufunc = _UFUNCS[key]
    if fmt.name == "bfloat16":
        reduce = reducer(fmt, key)

        def into_bf16(a: np.ndarray, b: np.ndarray, out: np.ndarray) -> None:
            out[...] = reduce(a, b)

        return into_bf16
    if fmt.name == "int32" and key in ("sum", "prod"):
        return lambda a, b, out: ufunc(a.view(np.uint32), b.view(np.uint32), out=out.view(np.uint32))
    return lambda a, b, out: ufunc(a, b, out=out)


# --- inputs ------------------------------------------------------------------------------------------------

def random_inputs(dtype: Any, shapes: list[tuple[int, int]], seed: int) -> list[np.ndarray]:
    """Per-rank random inputs (stored bits): small integers for int32, values in [-1, 1) for floats (sums and
    products of these round)."""
    fmt = number_format(dtype)
    rng = np.random.default_rng(seed)
    out = []
    for shape in shapes:
        if fmt.name == "int32":
            out.append(rng.integers(-1000, 1000, size=shape, dtype=np.int32))
        elif fmt.name == "bfloat16":
            out.append(float32_to_bf16(rng.uniform(-1, 1, size=shape).astype(np.float32)))
        else:
            out.append(rng.uniform(-1, 1, size=shape).astype(fmt.storage))
    return out


def exact_inputs(dtype: Any, ngpus: int, shape: tuple[int, int], seed: int) -> list[np.ndarray]:
    """Random float inputs whose sums over up to `ngpus` ranks are exact in `dtype` whatever the order (small
    multiples of a power of two); collsynth.runtime.layout.make_inputs uses them for every float type."""
    fmt = number_format(dtype)
    rng = np.random.default_rng(seed)
    # |value| <= 2^bits * 2^-scale, and ngpus values sum below 2^mantissa units of 2^-scale: exact.
    bits = max(1, min(12, fmt.mantissa - 1 - int(np.ceil(np.log2(max(1, ngpus))))))
    scale = np.float32(2.0 ** -min(6, bits))
    out = []
    for _ in range(max(1, ngpus)):
        values = rng.integers(-(1 << bits), (1 << bits) + 1, size=shape).astype(np.float32) * scale
        out.append(float32_to_bf16(values) if fmt.name == "bfloat16" else values.astype(fmt.storage))
    return out


def exact_product_inputs(dtype: Any, ngpus: int, shape: tuple[int, int], seed: int) -> list[np.ndarray]:
    """Random float inputs whose products over up to `ngpus` ranks are exact in `dtype` whatever the order.

    Each value is +-(k / 2^(b-1)) * 2^e with k a b-bit integer (top bit set) and e in {-1, 0}: a product of n
    of them is an integer of at most n*b <= p bits times a power of two within the normal range."""
    fmt = number_format(dtype)
    if not fmt.is_float:
        raise ExecutionError(f"exact_product_inputs is for float types, not {fmt.name}")
    n = max(1, ngpus)
    rng = np.random.default_rng(seed)
    bits = max(1, min(12, fmt.mantissa // n))
    info = np.finfo(np.float32 if fmt.name == "bfloat16" else fmt.storage)
    if n < info.maxexp and n <= -info.minexp:
        low_exponent = -1  # partial products stay within [2^-n, 2^n): normal, no overflow
    elif n < info.maxexp:
        low_exponent = 0  # [1, 2^n)
    else:
        bits, low_exponent = 1, 0  # only +-1: nothing else multiplies exactly this many times
    out = []
    for _ in range(n):
        k = rng.integers(1 << (bits - 1), 1 << bits, size=shape)
        exponent = rng.integers(low_exponent, 1, size=shape) - (bits - 1)
        sign = np.where(rng.integers(0, 2, size=shape) == 1, -1.0, 1.0)
        values = (sign * np.ldexp(k.astype(np.float64), exponent)).astype(np.float32)
        out.append(float32_to_bf16(values) if fmt.name == "bfloat16" else values.astype(fmt.storage))
    return out


# --- reference outputs ---------------------------------------------------------------------------------------

def reference_outputs(collective, inputs: Sequence[np.ndarray], op: str = "sum",
                      dtype: Any = None) -> list[tuple[np.ndarray, np.ndarray]]:
    """Collective.reference_outputs for any op and dtype: per rank (expected, checked), contributions combined in
    rank order with `reducer(dtype, op)` (one rounding per step, as the backends do). `inputs` are per rank
    (input_chunks, elems) arrays of stored bits of `dtype` (default: the inputs' numpy dtype, so numbers such as
    widened bfloat16 values are combined in their own type)."""
    fmt = number_format(inputs[0].dtype if dtype is None else dtype)
    reduce = reducer(fmt, op)
    elems = inputs[0].shape[1] if len(inputs) else 0
    values = []
    for c in range(collective.num_chunks):
        ranks = sorted(collective.pre[c])
        acc = np.array(inputs[ranks[0]][collective.input_index(c, ranks[0])], copy=True)
        if collective.combining:
            for r in ranks[1:]:
                acc = reduce(acc, inputs[r][collective.input_index(c, r)])
        values.append(acc)
    storage = inputs[0].dtype
    result = [(np.zeros((collective.output_chunks, elems), dtype=storage),
               np.zeros(collective.output_chunks, dtype=bool)) for _ in range(collective.num_ranks)]
    for c, r, i in collective.outputs:
        result[r][0][i] = values[c]
        result[r][1][i] = True
    return result
