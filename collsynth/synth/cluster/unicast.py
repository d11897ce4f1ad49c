"""The time-expanded greedy for one-destination collectives (AllToAll, Gather, Scatter) at cluster scale.

`timexp` keeps (ranks x chunks) matrices, which for AllToAll is n^3 cells (2^30 at 1024 ranks). Here chunks
with the same destination waiting at the same rank are interchangeable for routing, so the state is one
(ranks x destinations) count matrix: count[u, d] chunks for d wait at u. At each event every idle link
(u, v) whose switches have a free lane takes one chunk from u for the destination d that is farthest from u
among those with count[u, d] > 0 and dist(v, d) < dist(u, d) (minimal adaptive routing; ties broken by a
fixed per-rank permutation drawn from `seed`). Links are matched in groups of distinct senders (the k-th
idle link out of each rank) so that no count goes below zero; each group is one vectorised step. Every
chunk moves one hop closer per transfer, so it arrives after dist(src, dst) transfers.

Which chunk a transfer carries is recovered afterwards: at rank u, the chunks for d leave in the order they
became available there (first the ones u starts with, then arrivals by time), which is valid because a
transfer only starts when count[u, d] > 0.
"""

from __future__ import annotations

import heapq

import numpy as np

from collsynth.collectives import Collective
from collsynth.schedule.verify_fast import condition_keys
from collsynth.synth.cluster.timexp import GreedyError, Transfers, _Links, grant_lanes, idle_links
from collsynth.topologies import Topology

FIRST_CANDIDATES = 32  # destinations looked at before the full candidate list (most links find one there)


def one_destination_ends(collective: Collective) -> tuple[np.ndarray, np.ndarray] | None:
    """Each chunk's one source and one destination, read from the placements (not `pre`/`post`, ~0.5 GB of sets
    for a 1024-rank AllToAll); None unless every chunk has exactly one of each."""
    n, k = collective.num_ranks, collective.num_chunks
    ends = []
    for placement in (collective.inputs, collective.outputs):
        keys = condition_keys(placement, n)  # sorted: one key per chunk, in chunk order, iff one rank per chunk
        if len(keys) != k or (keys // n != np.arange(k)).any():
            return None
        ends.append(keys % n)
    return ends[0], ends[1]


def chunk_ends(collective: Collective) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk's one source and one destination (the collective must have one of each per chunk)."""
    ends = one_destination_ends(collective)
    if ends is None:
        raise GreedyError(f"greedy: {collective.name} has chunks with several sources or destinations; the "
                          "per-destination engine takes one of each (AllToAll, Gather, Scatter)")
    return ends


def _candidates(links: _Links, dist: np.ndarray, seed: int) -> np.ndarray:
    """Per link (u, v): the destinations d with dist(v, d) < dist(u, d), farthest from u first, padded with n."""
    n = dist.shape[0]
    tiebreak = np.argsort(np.random.default_rng(seed).random((n, n)), axis=1)
    rows = []
    for u, v in zip(links.src.tolist(), links.dst.tolist(), strict=True):
        useful = np.flatnonzero(dist[v] < dist[u])
        rows.append(useful[np.lexsort((tiebreak[u, useful], -dist[u, useful]))])
    width = max((len(r) for r in rows), default=1)
    table = np.full((len(rows), max(width, 1)), n, dtype=np.int32)
    for i, r in enumerate(rows):
        table[i, :len(r)] = r
    return table


class _Unicast:
    """Counts, the event queue and the transfers of one run."""

    def __init__(self, topology: Topology, links: _Links, src: np.ndarray, dst: np.ndarray, seed: int) -> None:
        n = topology.num_ranks
        self.links, self.n = links, n
        self.dist = np.array(topology.distances, dtype=float)
        moving = src != dst
        if np.isinf(self.dist[src[moving], dst[moving]]).any():
            raise GreedyError(f"greedy: some chunks cannot reach their destination on {topology.name}; check the "
                              "topology's links")
        self.count = np.zeros((n, n + 1), dtype=np.int32)  # column n: padding, always 0
        np.add.at(self.count, (src[moving], dst[moving]), 1)
        self.missing = int(moving.sum())
        self.order = _candidates(links, self.dist, seed)
        self.busy_until = np.zeros(len(links.src))
        self.lane_use = np.zeros(len(links.lanes), dtype=np.int64)
        self.arrivals: dict[float, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.times: list[float] = []
        self.rows: list[tuple[np.ndarray, np.ndarray, float]] = []  # (links, destinations, start)

    def land(self, now: float) -> None:
        blocks: list[tuple[np.ndarray, np.ndarray]] = []
        while self.times and self.times[0] <= now + 1e-9:
            blocks += self.arrivals.pop(heapq.heappop(self.times))
        if not blocks:
            return
        links = np.concatenate([b[0] for b in blocks])
        dests = np.concatenate([b[1] for b in blocks])
        v = self.links.dst[links]
        here = v == dests
        self.missing -= int(here.sum())
        np.add.at(self.count, (v[~here], dests[~here]), 1)
        sw = self.links.switches[links]
        np.subtract.at(self.lane_use, sw[sw >= 0], 1)

    def _pick(self, sel: np.ndarray) -> np.ndarray:
        # the first candidate destination with a waiting chunk, per link; n where there is none
        u = self.links.src[sel][:, None]
        first = self.order[sel, :FIRST_CANDIDATES]
        has = self.count[u, first] > 0
        at = has.argmax(axis=1)
        found = has[np.arange(len(sel)), at]
        picked = np.where(found, first[np.arange(len(sel)), at], self.n)
        rest = np.flatnonzero(~found)
        if len(rest) and self.order.shape[1] > FIRST_CANDIDATES:
            tail = self.order[sel[rest], FIRST_CANDIDATES:]
            has = self.count[u[rest], tail] > 0
            at = has.argmax(axis=1)
            picked[rest] = np.where(has[np.arange(len(rest)), at], tail[np.arange(len(rest)), at], self.n)
        return picked

    def match(self, now: float) -> None:
        free = idle_links(self.links, self.busy_until, self.lane_use, now)
        if not len(free):
            return
        free = free[np.argsort(self.links.src[free], kind="stable")]
        senders = self.links.src[free]
        starts = np.flatnonzero(np.r_[True, senders[1:] != senders[:-1]])
        group = np.arange(len(free)) - np.repeat(starts, np.diff(np.r_[starts, len(free)]))
        for g in range(int(group.max()) + 1):
            sel = free[group == g]
            dests = self._pick(sel)
            ok = dests < self.n
            sel, dests = sel[ok], dests[ok]
            keep = grant_lanes(self.links, self.lane_use, sel)
            if len(keep):
                self._start(sel[keep], dests[keep].astype(np.int64), now)

    def _start(self, links: np.ndarray, dests: np.ndarray, now: float) -> None:
        self.count[self.links.src[links], dests] -= 1
        ends = now + self.links.duration[links]
        self.busy_until[links] = ends
        distinct, which = np.unique(ends, return_inverse=True)
        for i, end in enumerate(distinct.tolist()):
            if end not in self.arrivals:
                self.arrivals[end] = []
                heapq.heappush(self.times, end)
            mine = which == i
            self.arrivals[end].append((links[mine], dests[mine]))
        self.rows.append((links.astype(np.int32), dests.astype(np.int32), now))  # int32: ~17M at 1024 ranks


def _index_dtype(*bounds: int) -> type[np.signedinteger]:
    """int32 where every value fits (keys u * n + d, transfer positions): half the memory of ~17M transfers."""
    return np.int32 if max(bounds) < 2**31 else np.int64


def _chunk_ids(n: int, src: np.ndarray, dst: np.ndarray, hop_src: np.ndarray, hop_dst: np.ndarray,
               dest: np.ndarray, start: np.ndarray, duration: np.ndarray) -> np.ndarray:
    """The chunk of every transfer (FIFO per (rank, destination); see the module docstring). A 1024-rank AllToAll
    has ~17M transfers: keys and positions are int32 where they fit, and each temporary goes once it is used."""
    it = _index_dtype(n * n + n, len(hop_src) + len(src))
    moving = np.flatnonzero(src != dst)
    # availabilities at (u, d): the chunks u starts with (time -1), then every arrival at a rank other than d
    onward = np.flatnonzero(hop_dst != dest).astype(it)
    avail_key = np.concatenate([(src[moving] * n + dst[moving]).astype(it),
                                hop_dst[onward].astype(it) * n + dest[onward].astype(it)])
    a = np.lexsort((np.concatenate([np.full(len(moving), -1.0), start[onward] + duration[onward]]), avail_key))
    sorted_avail = avail_key[a]
    del avail_key
    avail_what = np.concatenate([(-1 - moving).astype(it), onward])[a]  # < 0: chunk -1 - x; else the bringer
    del a, onward
    dep_key = hop_src.astype(it) * n + dest.astype(it)
    d = np.lexsort((start, dep_key))  # stable: ties keep transfer order
    sorted_dep = dep_key[d]
    del dep_key
    # the i-th departure from (u, d) takes the i-th availability there
    at = np.searchsorted(sorted_avail, sorted_dep, side="left")
    at -= np.searchsorted(sorted_dep, sorted_dep, side="left")
    at += np.arange(len(at))
    del sorted_avail, sorted_dep
    parent = np.empty(len(d), dtype=it)
    parent[d] = avail_what[at]
    del at, avail_what, d
    chunk = np.where(parent < 0, -1 - parent, -1).astype(it)
    while (chunk < 0).any():  # follow each transfer back to the one that brought its chunk
        todo = np.flatnonzero(chunk < 0)
        chunk[todo] = chunk[parent[todo]]
    return chunk


def run_unicast(topology: Topology, collective: Collective, links: _Links, *, seed: int = 0) -> Transfers:
    """Greedy transfers of a one-destination collective, with the chunk each carries."""
    src, dst = chunk_ends(collective)
    state = _Unicast(topology, links, src, dst, seed)
    now = 0.0
    while True:
        state.land(now)
        if state.missing == 0:
            break
        state.match(now)
        if not state.times:
            raise GreedyError(f"greedy: {collective.name} on {topology.name} cannot complete: {state.missing} "
                              "chunks are stuck; check the topology's links")
        now = state.times[0]
    rows = state.rows
    del state
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return Transfers(empty, empty, empty, np.zeros(0), np.zeros(0))
    link = np.concatenate([r[0] for r in rows])
    dest = np.concatenate([r[1] for r in rows])
    start = np.repeat(np.array([r[2] for r in rows]), [len(r[0]) for r in rows])
    del rows
    duration = links.duration[link]
    it = _index_dtype(topology.num_ranks)
    hop_src, hop_dst = links.src.astype(it)[link], links.dst.astype(it)[link]
    del link
    chunk = _chunk_ids(topology.num_ranks, src, dst, hop_src, hop_dst, dest, start, duration)
    return Transfers(chunk, hop_src, hop_dst, start, duration)
