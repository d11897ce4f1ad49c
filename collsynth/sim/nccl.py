"""nccl-tests conventions: data types, the size/count columns per collective, busbw factors, size sweeps.

What nccl-tests prints for one requested size S (bytes) and element size w (its `setupArgs` and each
collective's `GetCollByteCount` / `GetBw`), with c = S // w elements and n ranks:

  collective               count column (per-call param)        size column (bytes)    busbw factor
  AllReduce                c                                    c*w                    2(n-1)/n
  AllGather, Gather        b = (c // (4n)) * 4  (per rank)      b*n*w (total output)   (n-1)/n
  ReduceScatter, Scatter   b = (c // (4n)) * 4  (per rank)      b*n*w (total input)    (n-1)/n
  AllToAll                 p = (c // n) rounded down to 16 B    p*n*w (whole buffer)   (n-1)/n
  Broadcast, Reduce        c                                    c*w                    1
  anything else            c                                    c*w                    1

algbw = size column / time (GB/s, 1e9 bytes), busbw = algbw * factor. The size column is also the larger
of a rank's input and output buffers, which is the buffer MSCCL cuts into `nchunksperloop` chunks.
"""

from __future__ import annotations

from typing import NamedTuple

from collsynth.collectives.spec import canonical_name
from collsynth.core.errors import CollsynthError


class SimError(CollsynthError):
    """An IR or request the simulator cannot time (the message names the problem and the fix)."""


# Accepted spellings -> (nccl-tests type name, bytes per element).
DTYPES: dict[str, tuple[str, int]] = {
    "int8": ("int8", 1), "char": ("int8", 1), "uint8": ("uint8", 1),
    "int32": ("int32", 4), "int": ("int32", 4), "uint32": ("uint32", 4),
    "int64": ("int64", 8), "uint64": ("uint64", 8),
    "float16": ("half", 2), "half": ("half", 2), "fp16": ("half", 2),
    "bfloat16": ("bfloat16", 2), "bf16": ("bfloat16", 2),
    "float32": ("float", 4), "float": ("float", 4), "fp32": ("float", 4),
    "float64": ("double", 8), "double": ("double", 8), "fp64": ("double", 8),
}

_ALIGN = 4  # nccl-tests aligns per-rank counts of (all)gather / (reduce)scatter to 4 elements


def dtype_info(dtype: str) -> tuple[str, int]:
    """(nccl-tests type name, bytes per element) for a data type name such as float32 or half."""
    key = dtype.strip().lower()
    if key not in DTYPES:
        raise SimError(f"unknown data type {dtype!r}; use one of: {', '.join(sorted(DTYPES))}")
    return DTYPES[key]


class NcclSize(NamedTuple):
    """What nccl-tests prints for one requested size: the size column (bytes) and the count column."""

    size_bytes: int
    # nccl-tests' column name; shadowing tuple.count is deliberate (callers compare with plain tuples, so it
    # stays a NamedTuple) and mypy flags any NamedTuple field that shadows a tuple method.
    count: int  # type: ignore[assignment]


def nccl_size(collective: str, nranks: int, requested_bytes: int, elem_bytes: int) -> NcclSize:
    """The size and count columns nccl-tests prints for `requested_bytes` of `collective` on `nranks`."""
    if requested_bytes < 0:
        raise SimError(f"size must be >= 0 bytes, got {requested_bytes}")
    count = requested_bytes // elem_bytes
    kind = canonical_name(collective)
    if kind in ("allgather", "gather", "reducescatter", "scatter"):
        per_rank = (count // (_ALIGN * nranks)) * _ALIGN
        return NcclSize(per_rank * nranks * elem_bytes, per_rank)
    if kind == "alltoall":
        granule = max(1, 16 // elem_bytes)
        per_peer = (count // nranks) // granule * granule
        return NcclSize(per_peer * nranks * elem_bytes, per_peer)
    return NcclSize(count * elem_bytes, count)


def busbw_factor(collective: str, nranks: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = algbw * factor."""
    kind = canonical_name(collective)
    if nranks < 1:
        raise SimError(f"busbw factor needs at least 1 rank, got {nranks}")
    if kind == "allreduce":
        return 2.0 * (nranks - 1) / nranks
    if kind in ("allgather", "reducescatter", "alltoall", "gather", "scatter"):
        return (nranks - 1) / nranks
    return 1.0


def size_sweep(lo: int, hi: int, factor: int = 2) -> list[int]:
    """Sizes from lo to hi multiplying by `factor`, like nccl-tests `-b lo -e hi -f factor`."""
    if lo < 1 or hi < lo:
        raise SimError(f"size range {lo}:{hi} is empty; give LO:HI with 1 <= LO <= HI (e.g. 1KB:1GB)")
    if factor < 2:
        raise SimError(f"size step factor must be >= 2, got {factor}")
    sizes = []
    size = lo
    while size <= hi:
        sizes.append(size)
        size *= factor
    return sizes
