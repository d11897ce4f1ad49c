"""The postcondition check shared by the backends: outputs against Collective.reference_outputs.

Exact for integers, for non-combining collectives (pure data movement) and for the generated inputs
(their sums are exact in any order, see layout.make_inputs). For user-given floating-point inputs of a
combining collective the reduction order may differ from the reference's rank order, so each element
may differ by the rounding bound (2n+2) * eps * sum(|x|) over its n contributions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from collsynth.collectives.spec import Collective

MAX_DETAILS = 12


@dataclass(frozen=True)
class CheckOutcome:
    passed: bool
    message: str
    details: tuple[str, ...]
    max_error: float


def check_outputs(collective: Collective, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], *,
                  exact: bool, written: Sequence[np.ndarray] | None = None) -> CheckOutcome:
    """Compare per-rank outputs (output_chunks, elems) with the collective's reference for these inputs.

    `written`: per rank, which output chunks some step (or the aliased input) wrote; used to say that a
    wrong chunk was never written at all."""
    reference = collective.reference_outputs(list(inputs))
    floating = inputs[0].dtype.kind == "f"
    tolerance = None
    if floating and collective.combining and not exact:
        eps = float(np.finfo(inputs[0].dtype).eps)
        magnitude = collective.reference_outputs([np.abs(x).astype(np.float64) for x in inputs])
        tolerance = [(2 * collective.num_ranks + 2) * eps * expected for expected, _ in magnitude]
    wrong: list[str] = []
    bad_chunks = 0
    max_error = 0.0
    for rank, ((expected, checked), actual) in enumerate(zip(reference, outputs, strict=True)):
        rows = np.flatnonzero(checked)
        if rows.size == 0:
            continue
        diff = np.abs(actual[rows].astype(np.float64) - expected[rows].astype(np.float64))
        if tolerance is None:
            bad = np.any(diff != 0, axis=1) if diff.size else np.zeros(rows.size, dtype=bool)
        else:
            bad = np.any(diff > tolerance[rank][rows], axis=1)
        if diff.size:
            max_error = max(max_error, float(diff.max()))
        for row in rows[bad]:
            bad_chunks += 1
            if len(wrong) < MAX_DETAILS:
                wrong.append(_describe(collective, rank, int(row), actual[row], expected[row], written))
    total = sum(int(np.count_nonzero(checked)) for _, checked in reference)
    if bad_chunks:
        message = f"{bad_chunks} of {total} output chunks are wrong; first: {wrong[0]}"
        return CheckOutcome(False, message, tuple(wrong), max_error)
    how = "exactly" if tolerance is None else f"within rounding (max |error| {max_error:.3g})"
    return CheckOutcome(True, f"all {total} output chunks on {collective.num_ranks} ranks match {how}", (), max_error)


def _describe(collective: Collective, rank: int, row: int, actual: np.ndarray, expected: np.ndarray,
              written: Sequence[np.ndarray] | None) -> str:
    chunk = collective.output_chunk(rank, row)
    if collective.combining:
        want = f"the sum of chunk {chunk} over ranks {sorted(collective.pre[chunk])}"
    else:
        source = min(collective.pre[chunk])
        want = f"chunk {chunk} (rank {source} input[{collective.input_index(chunk, source)}])"
    if written is not None and not written[rank][row]:
        return f"rank {rank} output[{row}] should hold {want} but no step wrote it"
    where = int(np.flatnonzero(actual != expected)[0]) if np.any(actual != expected) else 0
    return (f"rank {rank} output[{row}] should hold {want}; element {where} is {actual[where]!r}, "
            f"expected {expected[where]!r}")
