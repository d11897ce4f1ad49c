"""The postcondition check shared by the backends: outputs against the collective's reference outputs.

The reference combines each chunk's contributions in rank order with the run's reduction op and dtype
(numerics.reference_outputs: one rounding per step, bfloat16 as the kernel rounds it). It is exact for
integers (int32 sum and prod wrap modulo 2**32, in any order), for max and min (no rounding), for
non-combining collectives (pure data movement) and for the generated inputs (their sums, and for prod
their products, are exact in any order; see layout.make_inputs). For user-given floating-point inputs
of a sum or prod the algorithm's order may differ from the reference's rank order, so each element may
differ by the rounding bound (2n+2) * eps * M over its n contributions, where M is sum(|x|) for sum and
prod(|x|) for prod (plus n smallest subnormals for a product that underflows).
Equal values pass (an infinity matches the same infinity, a NaN matches a NaN); anything else counts
its difference, a NaN or infinite difference as infinite.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.collectives.spec import Collective
from collsynth.runtime.numerics import OP_NOUNS, as_values, number_format, reduction_op, reference_outputs

MAX_DETAILS = 12


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    message: str
    details: tuple[str, ...]
    max_error: float


def check_outputs(collective: Collective, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], *,
                  exact: bool, written: Sequence[np.ndarray] | None = None, op: str = "sum",
                  dtype: Any = None) -> CheckOutcome:
    """Compare per-rank outputs (output_chunks, elems) with the collective's reference for these inputs.

    `inputs`/`outputs` are stored bits of `dtype` (default: the inputs' numpy dtype; bfloat16 is uint16
    bits, so name it). `exact`: the inputs were generated so that every reduction is exact (compare
    bit-exactly even for a floating-point sum or prod). `written`: per rank, which output chunks some
    step (or the aliased input) wrote; used to say that a wrong chunk was never written at all."""
    fmt = number_format(inputs[0].dtype if dtype is None else dtype)
    op = reduction_op(op)
    reference = reference_outputs(collective, inputs, op, fmt)
    tolerance = None
    if fmt.is_float and collective.combining and not exact and op in ("sum", "prod"):
        tolerance = _tolerance(collective, fmt, op, inputs)
    wrong: list[str] = []
    bad_chunks = 0
    max_error = 0.0
    for rank, ((expected_bits, checked), actual_bits) in enumerate(zip(reference, outputs, strict=True)):
        rows = np.flatnonzero(checked)
        if rows.size == 0:
            continue
        expected = as_values(fmt, expected_bits[rows]).astype(np.float64)
        actual = as_values(fmt, np.asarray(actual_bits)[rows]).astype(np.float64)
        with np.errstate(invalid="ignore"):
            same = (actual == expected) | (np.isnan(actual) & np.isnan(expected))
            diff = np.where(same, 0.0, np.abs(actual - expected))
        diff = np.where(np.isnan(diff), np.inf, diff)
        limit = 0.0 if tolerance is None else tolerance[rank][rows]
        bad = np.any(diff > limit, axis=1) if diff.size else np.zeros(rows.size, dtype=bool)
        if diff.size:
            max_error = max(max_error, float(diff.max()))
        for row in rows[bad]:
            bad_chunks += 1
            if len(wrong) < MAX_DETAILS:
                wrong.append(_describe(collective, op, rank, int(row), as_values(fmt, np.asarray(actual_bits)[row]),
                                       as_values(fmt, expected_bits[row]), written))
    total = sum(int(np.count_nonzero(checked)) for _, checked in reference)
    of_op = f" ({op})" if op != "sum" and collective.combining else ""
    if bad_chunks:
        message = f"{bad_chunks} of {total} output chunks are wrong{of_op}; first: {wrong[0]}"
        return CheckOutcome(False, message, tuple(wrong), max_error)
    how = "exactly" if tolerance is None else f"within rounding (max |error| {max_error:.3g})"
    return CheckOutcome(True, f"all {total} output chunks on {collective.num_ranks} ranks match {how}{of_op}", (),
                        max_error)


def _tolerance(collective: Collective, fmt, op: str, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per rank (output_chunks, elems): how far a correctly computed element may be from the rank-order reference."""
    magnitudes = [np.abs(as_values(fmt, x).astype(np.float64)) for x in inputs]
    bound = reference_outputs(collective, magnitudes, op)
    n = collective.num_ranks
    floor = n * float(np.finfo(fmt.value_dtype).smallest_subnormal) if op == "prod" else 0.0
    return [(2 * n + 2) * fmt.eps * expected + floor for expected, _ in bound]


def _describe(collective: Collective, op: str, rank: int, row: int, actual: np.ndarray, expected: np.ndarray,
              written: Sequence[np.ndarray] | None) -> str:
    chunk = collective.output_chunk(rank, row)
    if chunk is None:  # rows no chunk must reach are never checked, so never described
        return f"rank {rank} output[{row}] holds unexpected data"
    if collective.combining:
        want = f"the {OP_NOUNS[op]} of chunk {chunk} over ranks {sorted(collective.pre[chunk])}"
    else:
        source = min(collective.pre[chunk])
        want = f"chunk {chunk} (rank {source} input[{collective.input_index(chunk, source)}])"
    if written is not None and not written[rank][row]:
        return f"rank {rank} output[{row}] should hold {want} but no step wrote it"
    differs = (actual != expected) & ~(np.isnan(actual) & np.isnan(expected))
    where = int(np.flatnonzero(differs)[0]) if np.any(differs) else 0
    return (f"rank {rank} output[{row}] should hold {want}; element {where} is {actual[where]!r}, "
            f"expected {expected[where]!r}")
