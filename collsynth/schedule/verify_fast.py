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

from collsynth.schedule.algorithm import REDUCE, Algorithm


def _member(keys: np.ndarray, sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(found, position) of each key in a sorted array of distinct keys."""
    pos = np.searchsorted(sorted_keys, keys)
    inside = pos < len(sorted_keys)
    found = np.zeros(len(keys), dtype=bool)
    found[inside] = sorted_keys[pos[inside]] == keys[inside]
    return found, np.minimum(pos, max(len(sorted_keys) - 1, 0))


def _condition_keys(sets: tuple[frozenset[int], ...], n: int) -> np.ndarray:
    # key(c, r) = c * n + r for every r in sets[c], sorted (distinct by construction)
    sizes = np.fromiter((len(s) for s in sets), np.int64, len(sets))
    ranks = np.fromiter(chain.from_iterable(sets), np.int64, int(sizes.sum()))
    return np.sort(np.repeat(np.arange(len(sets), dtype=np.int64) * n, sizes) + ranks)


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


def structure_is_valid(algorithm: Algorithm) -> SendArrays | None:
    """The send arrays when rounds, chunk and rank ranges, links and capacities all pass; else None."""
    topo, coll = algorithm.topology, algorithm.collective
    n, k = coll.num_ranks, coll.num_chunks
    rounds = np.fromiter((s.rounds for s in algorithm.steps), np.int64, len(algorithm.steps))
    if (rounds < 1).any():
        return None
    sizes = [len(st.sends) for st in algorithm.steps]
    total = sum(sizes)

    def column(name: str, dtype: type = np.int64) -> np.ndarray:
        # straight from the steps, with no list of every send (~17M at 1024 ranks)
        values = map(attrgetter(name), chain.from_iterable(st.sends for st in algorithm.steps))
        return np.fromiter(values if name != "op" else map(REDUCE.__eq__, values), dtype, total)

    arrays = SendArrays(np.repeat(np.arange(len(rounds), dtype=np.int64), sizes), column("chunk"), column("src"),
                        column("dst"), column("op", bool))
    src, dst = arrays.src, arrays.dst
    if total and (arrays.chunk.min() < 0 or arrays.chunk.max() >= k or min(src.min(), dst.min()) < 0
                  or max(src.max(), dst.max()) >= n):
        return None
    link_keys = np.array([x.src * n + x.dst for x in topo.link_list], dtype=np.int64)
    link_order = np.argsort(link_keys)
    exists, pos = _member(src * n + dst, link_keys[link_order])
    if not exists.all() or not _capacity_ok(algorithm, arrays.step, link_order[pos], rounds):
        return None
    return arrays


def copy_schedule_is_valid(algorithm: Algorithm) -> bool:
    """Whether a non-combining algorithm passes every check of `verify` (see the module docstring)."""
    coll = algorithm.collective
    n = coll.num_ranks
    arrays = structure_is_valid(algorithm)
    if arrays is None or arrays.reduce.any():
        return False
    step, chunk, src, dst = arrays.step, arrays.chunk, arrays.src, arrays.dst
    pre = _condition_keys(coll.pre, n)
    recv = chunk * n + dst
    order = np.lexsort((step, recv))
    recv = recv[order]
    first = np.flatnonzero(np.r_[True, recv[1:] != recv[:-1]])  # each key's first reception (earliest step)
    recv_keys, first_step = recv[first], step[order[first]]
    del recv, order, first
    held = chunk * n + src
    held_before, _ = _member(held, pre)
    received, at = _member(held, recv_keys)
    del held
    if not (held_before | (received & (first_step[at] < step))).all():
        return False
    post = _condition_keys(coll.post, n)
    return bool((_member(post, pre)[0] | _member(post, recv_keys)[0]).all())
