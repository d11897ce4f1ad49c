"""The vectorised check behind `verify` for combining collectives (ReduceScatter, Reduce, AllReduce).

What a rank holds of a chunk is the set of ranks whose contributions it has summed; here that set is a packed
bitset row per (chunk, rank) that ever holds something, and every step is one numpy pass over its sends:
- every source holds its chunk at the start of the step (the values read are those of the step's start);
- the sends into one (chunk, rank) in one step are all copies of one same value, or all reduces;
- reduces go into a held chunk and add no contribution twice: popcount(acc | v1 | v2 ...) equals
  popcount(acc) + popcount(v1) + popcount(v2) + ... (the sets are pairwise disjoint);
- at the end every (chunk, rank) of the postcondition holds exactly the chunk's contributors.
Structure (ranges, links, capacities) is checked by `verify_fast.structure_is_valid`.
"""

from __future__ import annotations

import numpy as np

from collsynth.schedule.algorithm import Algorithm
from collsynth.schedule.verify_fast import _member, condition_keys, structure_is_valid

POPCOUNT = np.array([bin(i).count("1") for i in range(256)], dtype=np.int64)


def _bits(keys: np.ndarray, n: int, rows: np.ndarray, num_rows: int) -> np.ndarray:
    """Packed rows with bit (key % n) set in row rows[i] for every key i."""
    packed = np.zeros((num_rows, (n + 7) // 8), dtype=np.uint8)
    ranks = keys % n
    np.bitwise_or.at(packed, (rows, ranks // 8), (1 << (ranks % 8)).astype(np.uint8))
    return packed


def _apply_step(state: np.ndarray, held: np.ndarray, src: np.ndarray, dst: np.ndarray, reduce: np.ndarray) -> bool:
    """One step's sends (rows of `state`), applied in place; False at the first fault."""
    if not held[src].all():
        return False
    order = np.argsort(dst, kind="stable")
    d, values, red = dst[order], state[src[order]], reduce[order]
    new_group = np.r_[True, d[1:] != d[:-1]]
    starts = np.flatnonzero(new_group)
    group = np.cumsum(new_group) - 1
    all_red = np.logical_and.reduceat(red, starts)
    if (np.logical_or.reduceat(red, starts) != all_red).any():  # copy and reduce into one chunk at once
        return False
    copies = ~all_red[group]
    if (values[copies] != values[starts][group][copies]).any():  # different values copied into one chunk
        return False
    targets = d[starts]
    result = values[starts].copy()
    if all_red.any():
        summed = targets[all_red]
        if not held[summed].all():
            return False
        acc = state[summed]
        union = np.bitwise_or.reduceat(values, starts, axis=0)[all_red] | acc
        counts = np.add.reduceat(POPCOUNT[values].sum(axis=1), starts)[all_red]
        if (POPCOUNT[union].sum(axis=1) != POPCOUNT[acc].sum(axis=1) + counts).any():
            return False
        result[all_red] = union
    state[targets] = result
    held[targets] = True
    return True


def sum_schedule_is_valid(algorithm: Algorithm) -> bool:
    """Whether a combining algorithm passes every check of `verify` (see the module docstring)."""
    coll = algorithm.collective
    n = coll.num_ranks
    arrays = structure_is_valid(algorithm)
    if arrays is None:
        return False
    pre = condition_keys(coll.inputs, n)
    keys = np.union1d(pre, arrays.chunk * n + arrays.dst)
    found, src = _member(arrays.chunk * n + arrays.src, keys)
    if not found.all():  # a source that never holds its chunk
        return False
    dst = np.searchsorted(keys, arrays.chunk * n + arrays.dst)
    start_rows = np.searchsorted(keys, pre)
    state = _bits(pre, n, start_rows, len(keys))
    held = np.zeros(len(keys), dtype=bool)
    held[start_rows] = True
    cuts = np.searchsorted(arrays.step, np.arange(len(algorithm.steps) + 1))
    for a, b in zip(cuts[:-1].tolist(), cuts[1:].tolist(), strict=True):
        if a < b and not _apply_step(state, held, src[a:b], dst[a:b], arrays.reduce[a:b]):
            return False
    post = condition_keys(coll.outputs, n)
    there, rows = _member(post, keys)
    if not there.all() or not held[rows].all():
        return False
    full = _bits(pre, n, pre // n, coll.num_chunks)  # each chunk's contributors
    return bool((state[rows] == full[post // n]).all())
