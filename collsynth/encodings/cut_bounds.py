"""Cut lower bounds on the time of a collective under the alpha-beta model, fast at 1024 ranks.

For a set S of ranks, every chunk that some rank of S must end with and that no rank of S starts with has
to cross the links into S at least once (combining collectives: see `cut_bound_us`). With `rate(S)` the
most data per microsecond those links can carry,

    T >= min_alpha + need_mb(S) / rate(S)

and the bound is the maximum over the sets tried: every single rank (the *ingress* bound: each rank must
receive what it lacks through its own links), balls of growing radius around sampled ranks, the nodes
of a multi-node topology, and the two halves by rank number (a bisection of row-major tori and meshes and of
hypercubes, which is what bounds AllToAll there). `rate(S)` sums the links into S; each switch caps the links it shares
(lanes / beta); every link is charged to one switch at most, which keeps the sum an upper bound on the flow.

The LP flow bound of `encodings/bounds.py` is tighter for small instances; these are the cut bounds that
stay at seconds where the LP does not fit in memory. `cut_bound_rounds_per_chunk` is the same ingress/egress
cut in the SMT model's unit (rounds per chunk), for the SMT sweep's bound on instances too large for the LP.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import networkx as nx
import numpy as np

from collsynth.collectives import Collective, make_collective
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import reversed_topology

MIB = 1024 * 1024
BALL_CENTRES = 8  # ranks (spread evenly) whose balls of every radius are tried as cut sets


@dataclass(frozen=True)
class CutBound:
    """A lower bound in microseconds and the set that gives it (`kind`: ingress, ball, node or half)."""

    time_us: float
    kind: str
    ranks: tuple[int, ...]

    def __str__(self) -> str:
        where = f"rank {self.ranks[0]}" if len(self.ranks) == 1 else f"{len(self.ranks)} ranks"
        return f"{self.time_us:.1f} us ({self.kind} cut at {where})"


class _Cuts:
    def __init__(self, topology: Topology, collective: Collective, chunk_mb: float) -> None:
        self.n = topology.num_ranks
        links = topology.link_list
        self.src = np.array([x.src for x in links], dtype=np.int64)
        self.dst = np.array([x.dst for x in links], dtype=np.int64)
        self.rate = np.array([1.0 / x.beta_us_per_mb for x in links])  # MB per us
        index = {(x.src, x.dst): i for i, x in enumerate(links)}
        self.group = np.full(len(links), -1, dtype=np.int64)  # the switch a link is charged to
        self.group_cap = np.array([s.bandwidth / s.beta_us_per_mb for s in topology.switches] or [0.0])
        for g, switch in enumerate(topology.switches):
            for link in switch.links:
                if self.group[index[link]] < 0:
                    self.group[index[link]] = g
        # (chunk, rank) pairs, not chunks x ranks tables: a 1024-rank AllToAll has 1M chunks (1 GB per table)
        self.num_chunks = collective.num_chunks
        self.pre_chunk, self.pre_rank = _pairs(collective.pre)
        self.post_chunk, self.post_rank = _pairs(collective.post)
        self.chunk_mb = chunk_mb
        self.alpha = min((x.alpha_us for x in links), default=0.0)

    def ingress(self) -> CutBound:
        """All single-rank cuts at once (the same formula, vectorised over ranks)."""
        held = np.isin(self.post_chunk * self.n + self.post_rank, self.pre_chunk * self.n + self.pre_rank)
        need = np.bincount(self.post_rank[~held], minlength=self.n)
        alone = self.group < 0
        rate = np.bincount(self.dst[alone], weights=self.rate[alone], minlength=self.n).astype(float)
        shared = ~alone
        if shared.any():  # per (switch, rank): min(switch lanes / beta, its links' rates into the rank)
            key = self.group[shared] * self.n + self.dst[shared]
            pairs, where = np.unique(key, return_inverse=True)
            summed = np.bincount(where, weights=self.rate[shared])
            capped = np.minimum(summed, self.group_cap[pairs // self.n])
            rate += np.bincount(pairs % self.n, weights=capped, minlength=self.n)
        with np.errstate(divide="ignore"):
            times = np.where(need > 0, self.alpha + need * self.chunk_mb / rate, 0.0)
        rank = int(times.argmax())
        return CutBound(float(times[rank]), "ingress", (rank,))

    def time_us(self, members: np.ndarray) -> float:
        # T(S) = alpha + |{c : post(c) meets S, pre(c) misses S}| * chunk_mb / rate(into S)
        inside = np.zeros(self.n, dtype=bool)
        inside[members] = True
        wanted = np.zeros(self.num_chunks, dtype=bool)
        wanted[self.post_chunk[inside[self.post_rank]]] = True
        wanted[self.pre_chunk[inside[self.pre_rank]]] = False
        need = int(wanted.sum())
        if need == 0:
            return 0.0
        cut = ~inside[self.src] & inside[self.dst]
        free = self.rate[cut & (self.group < 0)].sum()
        grouped = np.bincount(self.group[cut & (self.group >= 0)], weights=self.rate[cut & (self.group >= 0)],
                              minlength=len(self.group_cap))
        rate = free + np.minimum(grouped, self.group_cap).sum()
        return float("inf") if rate <= 0 else self.alpha + need * self.chunk_mb / rate


def _pairs(placement: tuple[frozenset[int], ...]) -> tuple[np.ndarray, np.ndarray]:
    """The (chunk, rank) pairs of a pre- or postcondition, as two arrays."""
    sizes = np.fromiter(map(len, placement), dtype=np.int64, count=len(placement))
    chunks = np.repeat(np.arange(len(placement), dtype=np.int64), sizes)
    ranks = np.fromiter((r for ranks in placement for r in ranks), dtype=np.int64, count=int(sizes.sum()))
    return chunks, ranks


def _candidate_sets(topology: Topology) -> list[tuple[str, tuple[int, ...]]]:
    n = topology.num_ranks
    sets: list[tuple[str, tuple[int, ...]]] = []
    graph = topology.graph().reverse(copy=False)  # balls of ranks that reach the centre
    step = max(1, n // BALL_CENTRES)
    for centre in range(0, n, step):
        lengths = nx.single_source_shortest_path_length(graph, centre)
        for radius in range(1, max(lengths.values(), default=0)):
            ball = tuple(sorted(r for r, d in lengths.items() if d <= radius))
            if len(ball) < n:
                sets.append(("ball", ball))
    if topology.machines is not None and topology.num_machines > 1:
        for node in sorted(set(topology.machines)):
            sets.append(("node", tuple(r for r in range(n) if topology.machines[r] == node)))
    if n >= 4:  # the two halves by rank number: a bisection of row-major tori, meshes and hypercubes (AllToAll)
        sets += [("half", tuple(range(n // 2))), ("half", tuple(range(n // 2, n)))]
    return sets


def _dual(topology: Topology, collective: Collective) -> tuple[Topology, Collective]:
    # ReduceScatter/Reduce: the non-combining dual on the reversed topology; AllReduce: its ReduceScatter's
    if collective.name == "allreduce":
        return reversed_topology(topology), make_collective("allgather", collective.num_ranks, collective.chunks)
    if collective.combining and collective.name in ("reducescatter", "reduce"):
        return reversed_topology(topology), collective.non_combining_dual()
    return topology, collective


def cut_bound_us(topology: Topology, collective: Collective, size_bytes: int) -> CutBound:
    """The largest cut bound over the candidate sets, for buffers of `size_bytes` (nccl-tests' size).

    Combining collectives: ReduceScatter and Reduce are bounded as their non-combining duals on the reversed
    topology (a schedule of one runs backwards as a schedule of the other). AllReduce gets the ReduceScatter
    bound (its data movement contains a ReduceScatter's: every rank ends with sums over all ranks)."""
    chunk_mb = size_bytes / max(collective.input_chunks, collective.output_chunks) / MIB
    cuts = _Cuts(*_dual(topology, collective), chunk_mb)
    best = cuts.ingress()
    for kind, ranks in _candidate_sets(topology):
        value = cuts.time_us(np.array(ranks))
        if value > best.time_us:
            best = CutBound(value, kind, ranks)
    return best


def set_bound_us(topology: Topology, collective: Collective, size_bytes: int, ranks: tuple[int, ...]) -> CutBound:
    """The cut bound of one given set of ranks (e.g. a minimum cut found by a flow computation)."""
    chunk_mb = size_bytes / max(collective.input_chunks, collective.output_chunks) / MIB
    cuts = _Cuts(*_dual(topology, collective), chunk_mb)
    return CutBound(cuts.time_us(np.array(ranks, dtype=np.int64)), "flow", tuple(ranks))


def ingress_bound_us(topology: Topology, collective: Collective, size_bytes: int) -> CutBound:
    """The single-rank cuts only: each rank must receive what it lacks through its own links."""
    chunk_mb = size_bytes / max(collective.input_chunks, collective.output_chunks) / MIB
    return _Cuts(*_dual(topology, collective), chunk_mb).ingress()


def cut_bound_rounds_per_chunk(topology: Topology, collective: Collective) -> Fraction:
    """max over ranks of (chunks in / in-bandwidth, chunks out / out-bandwidth), per chunk of the collective."""
    n = topology.num_ranks
    bw_in, bw_out = [0] * n, [0] * n
    for link in topology.link_list:
        bw_in[link.dst] += link.bandwidth
        bw_out[link.src] += link.bandwidth
    need_in, need_out = [0] * n, [0] * n
    for pre, post in zip(collective.pre, collective.post, strict=True):
        if collective.combining:
            # rank v in post(c) receives chunk c at least once unless it holds every contribution itself;
            # rank u in pre(c) sends its contribution at least once unless only u needs the result
            # (pre - {v} is non-empty iff pre has another rank: tested without building the set)
            receivers = [v for v in post if len(pre) > 1 or v not in pre]
            senders = [u for u in pre if len(post) > 1 or u not in post]
        else:
            # rank v in post(c) \ pre(c) receives chunk c; a sole holder u sends it at least once
            receivers = list(post - pre)
            senders = list(pre) if len(pre) == 1 and receivers else []
        for v in receivers:
            need_in[v] += 1
        for u in senders:
            need_out[u] += 1
    worst = Fraction(0)
    for r in range(n):
        for need, bandwidth in ((need_in[r], bw_in[r]), (need_out[r], bw_out[r])):
            if need and bandwidth:
                worst = max(worst, Fraction(need, bandwidth))
    return worst / collective.chunks
