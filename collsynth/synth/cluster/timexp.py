"""The time-expanded link-chunk matching engine behind `greedy` (in the spirit of TACOS; our own code).

Time advances from event to event (a transfer arriving). At each event every idle link (u, v) whose
switches have a free lane claims one chunk that u holds, that v lacks and is not already receiving, and that
is useful at v: every chunk for broadcast-like collectives (every rank wants it), or, for a chunk with one
destination, a chunk whose destination is strictly closer (in hops) from v than from u. Among the
candidates a link takes the rarest chunk (fewest holders), ties broken by a fixed per-rank permutation
drawn from `seed`, so runs are deterministic. The links of one event are matched in groups (the k-th idle
link into each rank), so that one rank never receives the same chunk twice; each group is one vectorised
numpy step over all its links, which keeps 1024 ranks in seconds.

A transfer on link l takes `alpha + chunk_mb * beta` microseconds, beta being the slower of the link and
its switches; a link carries one transfer at a time and a switch with b lanes b at a time.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from collsynth.collectives import Collective
from collsynth.core.errors import CollsynthError
from collsynth.topologies import Topology

MIB = 1024 * 1024
Routes = Mapping[tuple[int, int], Sequence[int]]
# Largest (ranks x chunks) state the engine keeps (two bool and one int32 matrix of this many cells).
MAX_CELLS = 1 << 26


class GreedyError(CollsynthError):
    """An instance the time-expanded greedy cannot handle (the message says what to use instead)."""


@dataclass(frozen=True)
class Transfers:
    """The matched transfers, one row each, in order of start time."""

    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start_us: np.ndarray
    duration_us: np.ndarray

    @property
    def makespan_us(self) -> float:
        return float((self.start_us + self.duration_us).max()) if len(self.chunk) else 0.0


@dataclass(frozen=True)
class _Links:
    src: np.ndarray
    dst: np.ndarray
    duration: np.ndarray
    switches: np.ndarray  # (links, max switches per link), -1 padded
    lanes: np.ndarray  # lanes per switch


def link_arrays(topology: Topology, chunk_mb: float) -> _Links:
    """Per-link arrays: endpoints, transfer time of one chunk, switches (padded)."""
    ordered = sorted(topology.link_list, key=lambda x: (x.dst, x.src))
    index = {(x.src, x.dst): i for i, x in enumerate(ordered)}
    members: list[list[int]] = [[] for _ in ordered]
    beta = np.array([x.beta_us_per_mb for x in ordered], dtype=float)
    for s, switch in enumerate(topology.switches):
        for link in switch.links:
            i = index[link]
            members[i].append(s)
            beta[i] = max(beta[i], switch.beta_us_per_mb)
    width = max((len(m) for m in members), default=0)
    padded = np.full((len(ordered), max(width, 1)), -1, dtype=np.int64)
    for i, m in enumerate(members):
        padded[i, :len(m)] = m
    alpha = np.array([x.alpha_us for x in ordered], dtype=float)
    ends = np.array([(x.src, x.dst) for x in ordered], dtype=np.int64).reshape(-1, 2)
    lanes = np.array([s.bandwidth for s in topology.switches] or [0])
    return _Links(ends[:, 0], ends[:, 1], alpha + chunk_mb * beta, padded, lanes)


def _routing(topology: Topology, collective: Collective) -> np.ndarray | None:
    """None when every chunk is wanted by every rank (useful = lacking); else each chunk's one destination."""
    n = collective.num_ranks
    if all(len(post) == n for post in collective.post):
        return None
    if all(len(post) == 1 for post in collective.post):
        return np.array([next(iter(post)) for post in collective.post], dtype=np.int64)
    raise GreedyError(f"greedy: collective {collective.name!r} has chunks wanted by some but not all ranks; the "
                      "greedy handles broadcast-like chunks (all ranks) and one-destination chunks; use `synth milp`")


class _State:
    """Holdings, receptions in flight and the event queue of one run."""

    def __init__(self, topology: Topology, collective: Collective, links: _Links, seed: int,
                 routes: Routes | None = None) -> None:
        n, k = collective.num_ranks, collective.num_chunks
        self.links = links
        self.have = np.zeros((n, k), dtype=bool)
        for c, pre in enumerate(collective.pre):
            self.have[list(pre), c] = True
        self.inflight = np.zeros((n, k), dtype=bool)
        self.want = np.zeros((n, k), dtype=bool)
        for c, post in enumerate(collective.post):
            self.want[list(post), c] = True
        self.missing = int((self.want & ~self.have).sum())
        rng = np.random.default_rng(seed)
        self.tiebreak = np.argsort(rng.random((n, k)), axis=1).astype(np.int32)
        self.busy_until = np.zeros(len(links.src))
        self.lane_use = np.zeros(len(links.lanes), dtype=np.int64)
        self.arrivals: dict[float, list[tuple[np.ndarray, np.ndarray]]] = {}  # time -> [(links, chunks)]
        self.times: list[float] = []
        self.dest = _routing(topology, collective)
        self.dist = np.array(topology.distances, dtype=float) if self.dest is not None else None
        self.delivered = np.zeros(k, dtype=bool)
        self._sel = np.zeros(0, dtype=np.int64)
        self.rows: list[tuple[np.ndarray, np.ndarray, float]] = []  # (links, chunks, start)
        self.allowed = None if routes is None else _allowed(links, routes, k)

    def land(self, now: float) -> None:
        """Apply every arrival due by `now` (one vectorised update over all of them)."""
        blocks: list[tuple[np.ndarray, np.ndarray]] = []
        while self.times and self.times[0] <= now + 1e-9:
            blocks += self.arrivals.pop(heapq.heappop(self.times))
        if not blocks:
            return
        links = np.concatenate([b[0] for b in blocks])
        chunks = np.concatenate([b[1] for b in blocks])
        v = self.links.dst[links]
        self.have[v, chunks] = True
        self.inflight[v, chunks] = False
        wanted = self.want[v, chunks]
        self.missing -= int(wanted.sum())
        if self.dest is not None:
            self.delivered[chunks[wanted]] = True
        sw = self.links.switches[links]
        np.subtract.at(self.lane_use, sw[sw >= 0], 1)

    def useful(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        # candidate(l, c) = have[u, c] & !have[v, c] & !inflight[v, c] & useful(l, c)
        cand = self.have[src] & ~self.have[dst] & ~self.inflight[dst]
        if self.allowed is not None:
            return cand & self.allowed[self._sel]
        if self.dest is not None and self.dist is not None:
            closer = self.dist[dst][:, self.dest] < self.dist[src][:, self.dest]
            cand &= closer & ~self.delivered[None, :]
        return cand

    def eligible(self, now: float) -> np.ndarray:
        """Idle links whose switches all have a free lane."""
        return idle_links(self.links, self.busy_until, self.lane_use, now)

    def match(self, now: float) -> int:
        """Give every eligible link at `now` a chunk, in groups of distinct receivers; returns transfers begun."""
        free = self.eligible(now)
        if not len(free):
            return 0
        dst_all = self.links.dst[free]
        starts = np.flatnonzero(np.r_[True, dst_all[1:] != dst_all[:-1]])
        group = np.arange(len(free)) - np.repeat(starts, np.diff(np.r_[starts, len(free)]))
        n, k = self.have.shape
        rarity = ((n - self.have.sum(axis=0)) * k).astype(np.int32)  # n*k <= MAX_CELLS fits
        begun = 0
        for g in range(int(group.max()) + 1):
            sel = free[group == g]
            src, dst = self.links.src[sel], self.links.dst[sel]
            self._sel = sel
            cand = self.useful(src, dst)
            if not cand.any():
                continue
            score = np.where(cand, rarity[None, :] + self.tiebreak[dst], -1)
            best = score.argmax(axis=1)
            ok = score[np.arange(len(sel)), best] >= 0
            begun += self._start(sel[ok], best[ok], now)
        return begun

    def _start(self, links: np.ndarray, chunks: np.ndarray, now: float) -> int:
        keep = grant_lanes(self.links, self.lane_use, links)
        links, chunks = links[keep], chunks[keep]
        if not len(links):
            return 0
        self.inflight[self.links.dst[links], chunks] = True
        ends = now + self.links.duration[links]
        self.busy_until[links] = ends
        distinct, which = np.unique(ends, return_inverse=True)
        for i, end in enumerate(distinct.tolist()):
            if end not in self.arrivals:
                self.arrivals[end] = []
                heapq.heappush(self.times, end)
            mine = which == i
            self.arrivals[end].append((links[mine], chunks[mine]))
        self.rows.append((links, chunks, now))
        return len(links)


def idle_links(links: _Links, busy_until: np.ndarray, lane_use: np.ndarray, now: float) -> np.ndarray:
    """Indices of the idle links whose switches all have a free lane."""
    idle = busy_until <= now + 1e-9
    sw = links.switches
    if (sw >= 0).any():
        full = np.append(lane_use >= links.lanes, False)  # index -1 -> "no switch"
        idle &= ~full[sw].any(axis=1)
    return np.flatnonzero(idle)


def grant_lanes(links: _Links, lane_use: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """Positions in `chosen` (link indices, in claim order) that get a lane on every switch they pass; their
    lanes are taken in `lane_use`."""
    if not (links.switches >= 0).any():
        return np.arange(len(chosen))
    keep = []
    for i, link in enumerate(chosen.tolist()):
        sw = links.switches[link]
        sw = sw[sw >= 0]
        if (lane_use[sw] < links.lanes[sw]).all():
            lane_use[sw] += 1
            keep.append(i)
    return np.array(keep, dtype=np.int64)


def _allowed(links: _Links, routes: Routes, num_chunks: int) -> np.ndarray:
    index = {(int(s), int(d)): i for i, (s, d) in enumerate(zip(links.src, links.dst, strict=True))}
    allowed = np.zeros((len(links.src), num_chunks), dtype=bool)
    for link, chunks in routes.items():
        allowed[index[link], list(chunks)] = True
    return allowed


def run_greedy(topology: Topology, collective: Collective, chunk_mb: float, *, seed: int = 0,
               routes: Routes | None = None) -> Transfers:
    """Match chunks to links over time until the postcondition holds; the transfers, by start time.
    `routes` (link -> chunks it may carry) confines every chunk to its links, e.g. a tree's edges."""
    cells = collective.num_ranks * collective.num_chunks
    if cells > MAX_CELLS:
        raise GreedyError(f"greedy: {collective.num_ranks} ranks x {collective.num_chunks} chunks is too large "
                          f"(limit {MAX_CELLS} cells); use fewer chunks or a hierarchical composition")
    links = link_arrays(topology, chunk_mb)
    state = _State(topology, collective, links, seed, routes)
    now = 0.0
    while True:
        state.land(now)
        if state.missing == 0:
            break
        begun = state.match(now)
        if not state.times:
            raise GreedyError(f"greedy: {collective.name} on {topology.name} cannot complete: "
                              f"{state.missing} (chunk, rank) pairs are unreachable; check the topology's links")
        del begun
        now = state.times[0]
    if not state.rows:
        empty = np.zeros(0, dtype=np.int64)
        return Transfers(empty, empty, empty, np.zeros(0), np.zeros(0))
    link_idx = np.concatenate([r[0] for r in state.rows])
    chunk = np.concatenate([r[1] for r in state.rows])
    start = np.concatenate([np.full(len(r[0]), r[2]) for r in state.rows])
    return Transfers(chunk, links.src[link_idx], links.dst[link_idx], start, links.duration[link_idx])
