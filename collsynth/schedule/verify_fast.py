"""The vectorised check behind `verify` for non-combining (copy-only) collectives.

For copies the value a rank holds never matters, only whether it holds the chunk: rank r holds chunk c at the
start of step t iff r is in pre(c) or r received c in some step before t. So the whole replay reduces to array
operations over all sends at once, keyed by `chunk * ranks + rank`:
- first_step(c, r) = min step of the sends of c into r; a send (c, u -> v) at step t needs u in pre(c) or
  first_step(c, u) < t;
- per (step, link): count <= bandwidth * rounds; per (step, switch): sum of its links' counts <= budget * rounds;
- at the end every (c, r) with r in post(c) is in pre or was received.
It answers valid or not; `verify` then runs the send-by-send reference to name the first fault.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import attrgetter

import numpy as np

from collsynth.collectives.spec import Placement
from collsynth.schedule.algorithm import REDUCE, Algorithm


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found, position) of each key in a sorted array of distinct keys."""
    pos = np.searchsorted(sorted_keys, keys)
    inside = pos < len(sorted_keys)
    found = np.zeros(len(keys), dtype=bool)
    found[inside] = sorted_keys[pos[inside]] == keys[inside]
    return found, np.minimum(pos, max(len(sorted_keys) - 1, 0))


def condition_keys(placement: Placement, n: int) -> np.ndarray:
    """Sorted distinct keys `c * n + r` of the (chunk, rank) pairs of a collective's `inputs` or `outputs`: the
    pairs of `pre` or `post`, read from the placement, so those tuples of sets (~0.5 GB for a 1024-rank
    AllToAll) are never built."""
    flat = np.fromiter(chain.from_iterable(placement), np.int64, 3 * len(placement)).reshape(-1, 3)
    return np.unique(flat[:, 0] * n + flat[:, 1])


def _capacity_ok(algorithm: Algorithm, step: np.ndarray, link: np.ndarray, rounds: np.ndarray) -> bool:
    # sends(t, l) <= bandwidth(l) * rounds(t); sends(t, switch) <= budget(switch) * rounds(t)
    topo = algorithm.topology
    num_links = len(topo.link_list)
    pairs, counts = np.unique(step * num_links + link, return_counts=True)
    t, lk = pairs // num_links, pairs % num_links
    bandwidth = np.array([x.bandwidth for x in topo.link_list], dtype=np.int64)
    cap = bandwidth[lk] * rounds[t]
    if ((cap > 0) & (counts > cap)).any():
        return False
    if not topo.switches:
        return True
    index = {(x.src, x.dst): i for i, x in enumerate(topo.link_list)}
    members = sorted((index[pair], w) for w, sw in enumerate(topo.switches) for pair in sw.links if pair in index)
    if not members:
        return True
    m_link = np.array([m[0] for m in members], dtype=np.int64)
    m_switch = np.array([m[1] for m in members], dtype=np.int64)
    first = np.searchsorted(m_link, lk)
    many = np.searchsorted(m_link, lk, side="right") - first
    rows = np.repeat(np.arange(len(lk)), many)
    offsets = np.arange(len(rows)) - np.repeat(np.cumsum(many) - many, many)
    switch = m_switch[first[rows] + offsets]
    num_switches = len(topo.switches)
    keys, where = np.unique(t[rows] * num_switches + switch, return_inverse=True)
    used = np.bincount(where, weights=counts[rows])
    budget = np.array([sw.bandwidth for sw in topo.switches], dtype=np.int64)
    return bool((used <= budget[keys % num_switches] * rounds[keys // num_switches]).all())


@dataclass(frozen=True)
class SendArrays:
    """Every send of an algorithm, one row each, in step order."""

    step: np.ndarray
    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    reduce: np.ndarray  # bool: op is reduce


def index_dtype(algorithm: Algorithm) -> type[np.signedinteger]:
    """int32 where every key the check forms fits (chunk * ranks + rank, step * links + link, step * switches +
    switch): half the memory of int64 for the ~17M sends of a 1024-rank AllToAll."""
    n, k = algorithm.collective.num_ranks, algorithm.collective.num_chunks
    width = max(len(algorithm.topology.link_list), len(algorithm.topology.switches))
    bound = max(max(k, n) * n + n, (len(algorithm.steps) + 1) * (width + 1))
    return np.int32 if bound < 2**31 else np.int64


def structure_is_valid(algorithm: Algorithm) -> SendArrays | None:
    """The send arrays when rounds, chunk and rank ranges, links and capacities all pass; else None."""
    topo, coll = algorithm.topology, algorithm.collective
    n, k = coll.num_ranks, coll.num_chunks
    rounds = np.fromiter((s.rounds for s in algorithm.steps), np.int64, len(algorithm.steps))
    if (rounds < 1).any():
        return None
    sizes = [len(st.sends) for st in algorithm.steps]
    total = sum(sizes)
    it = index_dtype(algorithm)

    def column(name: str, dtype: type = it) -> np.ndarray:
        # straight from the steps, with no list of every send (~17M at 1024 ranks)
        values = map(attrgetter(name), chain.from_iterable(st.sends for st in algorithm.steps))
        return np.fromiter(values if name != "op" else map(REDUCE.__eq__, values), dtype, total)

    try:
        arrays = SendArrays(np.repeat(np.arange(len(rounds), dtype=it), sizes), column("chunk"), column("src"),
                            column("dst"), column("op", bool))
    except OverflowError:  # a chunk or rank far outside the collective (the int32 columns cannot hold it)
        return None
    src, dst = arrays.src, arrays.dst
    if total and (arrays.chunk.min() < 0 or arrays.chunk.max() >= k or min(src.min(), dst.min()) < 0
                  or max(src.max(), dst.max()) >= n):
        return None
    link_keys = np.array([x.src * n + x.dst for x in topo.link_list], dtype=it)
    link_order = np.argsort(link_keys)
    exists, pos = _member(src * n + dst, link_keys[link_order])
    if not exists.all():
        return None
    del exists
    link = link_order.astype(it)[pos]
    del pos
    return arrays if _capacity_ok(algorithm, arrays.step, link, rounds) else None


def copy_schedule_is_valid(algorithm: Algorithm) -> bool:
    """Whether a non-combining algorithm passes every check of `verify` (see the module docstring)."""
    coll = algorithm.collective
    n = coll.num_ranks
    arrays = structure_is_valid(algorithm)
    if arrays is None or arrays.reduce.any():
        return False
    step, chunk, src, dst = arrays.step, arrays.chunk, arrays.src, arrays.dst
    del arrays
    pre = condition_keys(coll.inputs, n)
    recv = chunk * n + dst
    del dst
    order = np.argsort(recv, kind="stable")  # rows are in step order: a key's first row is its earliest step
    recv = recv[order]
    first = np.flatnonzero(np.r_[True, recv[1:] != recv[:-1]])  # each key's first reception (earliest step)
    recv_keys, first_step = recv[first], step[order[first]]
    del recv, order, first
    held = chunk * n + src
    del chunk, src
    held_before, _ = _member(held, pre)
    received, at = _member(held, recv_keys)
    del held
    if not (held_before | (received & (first_step[at] < step))).all():
        return False
    post = condition_keys(coll.outputs, n)
    return bool((_member(post, pre)[0] | _member(post, recv_keys)[0]).all())
