"""Lower bounds on the steps and on the rounds per chunk (R/C) of any algorithm, for the Pareto sweep.

Steps: the longest shortest path some piece of data must travel.

Rounds per chunk: a linear program (built with `MilpModel`, solved with HiGHS). Every algorithm routes, for
each chunk and each rank that needs it, the chunk along a path from a rank that has it: a unit *flow* per
(chunk, destination).
A link carries a chunk once however many destinations it serves (data may be copied), so a chunk's use of
a link is the largest of its per-destination flows there, and per round a link carries at most its
bandwidth (a switch: its budget). Minimizing the rounds this needs gives a bound that is never above the
truth. Unlike a flow model that lets a rank forward more than it received, the flows here are conserved:
data is never created on the way, which is what makes the bound tight for Scatter / Gather / AllToAll
(7/6 on DGX-1 Scatter, not 7/24).

Combining collectives: every contribution must reach every rank that needs the sum, so the same model
runs with one flow per (chunk, contributor, receiver). For AllReduce (every rank contributes to and needs
every chunk), one-way gossip needs at least 2(n-1) messages per chunk, which the LP adds as a count.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from collsynth.collectives import Collective
from collsynth.core.errors import CollsynthError
from collsynth.encodings.cut_bounds import cut_bound_rounds_per_chunk
from collsynth.encodings.milp_model import Lin, MilpModel, Row, at_least, at_most, equal
from collsynth.encodings.sccl_z3 import instance_symmetries
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import orbits

# Past this many flow columns (commodities x links, before the symmetry reduction) building the LP alone takes
# minutes and gigabytes: the bound falls back to the ingress/egress cut (`cut_bounds`), weaker but in seconds.
MAX_FLOW_COLUMNS = 20_000_000


class ImpossibleCollectiveError(CollsynthError):
    """The collective cannot be implemented on the topology at all (some data can never arrive)."""


@dataclass(frozen=True)
class Commodity:
    """A unit of data that must travel from one of `sources` to `sink`."""

    sources: frozenset[int]
    sink: int


def data_paths(collective: Collective, chunk: int) -> list[Commodity]:
    """What must travel for one chunk: (holders -> each destination) or, when combining, (each contributor ->
    each rank that needs the sum)."""
    pre, post = collective.pre[chunk], collective.post[chunk]
    if collective.combining:
        return [Commodity(frozenset([p]), r) for p in sorted(pre) for r in sorted(post) if r != p]
    return [Commodity(pre, d) for d in sorted(post - pre)]


def lower_bound_steps(topology: Topology, collective: Collective) -> int:
    """The fewest steps any algorithm needs; raises ImpossibleCollectiveError when data cannot arrive.

    steps >= max over commodities of min over its sources of dist(source, sink); chunks with the same
    (pre, post) share one vectorised evaluation on the distance matrix (1024-rank AllReduce in seconds)."""
    _check_sizes(topology, collective)
    dist = np.array(topology.distances, dtype=float)
    worst = 0.0
    seen: set[tuple[frozenset[int], frozenset[int]]] = set()
    for c in range(collective.num_chunks):
        pre, post = collective.pre[c], collective.post[c]
        if (pre, post) in seen:
            continue
        seen.add((pre, post))
        sinks = sorted(post) if collective.combining else sorted(post - pre)
        if not sinks or not pre:
            continue
        block = dist[np.ix_(sorted(pre), sinks)]  # dist(p, p) = 0 never raises the maximum
        hops = float(block.max()) if collective.combining else float(block.min(axis=0).max())
        if hops == float("inf"):
            _raise_unreachable(topology, collective, c, dist)
        worst = max(worst, hops)
    return int(worst)


def _raise_unreachable(topology: Topology, collective: Collective, chunk: int, dist: np.ndarray) -> None:
    for commodity in data_paths(collective, chunk):
        if min(dist[s][commodity.sink] for s in commodity.sources) == float("inf"):
            raise ImpossibleCollectiveError(
                f"{collective.name} is impossible on {topology.name}: no path from rank {min(commodity.sources)} "
                f"to rank {commodity.sink}; use a connected topology")


def lower_bound_rounds_per_chunk(topology: Topology, collective: Collective) -> Fraction:
    """A lower bound on R/C for any algorithm (the multi-commodity flow LP above, solved with HiGHS).

    The LP is invariant under the instance's symmetries, so averaging an optimum over them gives a
    symmetric optimum: the LP is solved with one column per orbit of columns (same optimum, far smaller).
    Instances past `MAX_FLOW_COLUMNS` get the cut bound instead."""
    lower_bound_steps(topology, collective)  # reachability first: the LP would only say "infeasible"
    groups: dict[tuple[frozenset[int], frozenset[int]], list[int]] = defaultdict(list)
    for c in range(collective.num_chunks):
        if _commodity_count(collective, c):
            groups[(collective.pre[c], collective.post[c])].append(c)
    if not groups:
        return Fraction(0)
    flows = sum(_commodity_count(collective, members[0]) for members in groups.values())
    if flows * len(topology.link_list) > MAX_FLOW_COLUMNS:  # e.g. 1024-rank AllReduce: ~4e9 columns
        return cut_bound_rounds_per_chunk(topology, collective)
    representative = {c: members[0] for members in groups.values() for c in members}
    lp = _FlowLP(topology)
    gossip = collective.combining and topology.num_ranks > 1 and all(
        pre == post == frozenset(range(topology.num_ranks)) for pre, post in groups)
    for members in groups.values():
        usage = lp.chunk_usage(members[0], data_paths(collective, members[0]))
        lp.add_usage(usage, len(members))
        if gossip:
            lp.at_least(usage, 2 * (topology.num_ranks - 1))
    symmetries = instance_symmetries(topology, collective)
    value = lp.minimize_rounds([_column_move(ranks, chunks, representative) for ranks, chunks in symmetries])
    return _safe_fraction(value) / collective.chunks


def _commodity_count(collective: Collective, chunk: int) -> int:
    # len(data_paths(collective, chunk)), without building them
    pre, post = collective.pre[chunk], collective.post[chunk]
    if collective.combining:
        return len(pre) * len(post) - len(pre & post)
    return len(post - pre)


def _column_move(ranks: tuple[int, ...], chunks: tuple[int, ...],
                 representative: dict[int, int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    def move(key: tuple) -> tuple:
        if key[0] == "f":  # ("f", chunk, sources, sink, src, dst)
            _, c, sources, sink, a, b = key
            return ("f", representative[chunks[c]], tuple(sorted(ranks[x] for x in sources)), ranks[sink],
                    ranks[a], ranks[b])
        if key[0] == "u":  # ("u", chunk, src, dst)
            return ("u", representative[chunks[key[1]]], ranks[key[2]], ranks[key[3]])
        return key
    return move


def _check_sizes(topology: Topology, collective: Collective) -> None:
    if topology.num_ranks != collective.num_ranks:
        raise ImpossibleCollectiveError(f"{collective.name} is defined for {collective.num_ranks} ranks but "
                                        f"{topology.name} has {topology.num_ranks}")


def _safe_fraction(value: float) -> Fraction:
    # The LP optimum is a ratio of small integers; recover it, but never round a bound up past float noise.
    candidate = Fraction(value).limit_denominator(10_000)
    if abs(float(candidate) - value) <= 1e-7 * max(1.0, abs(value)) and float(candidate) <= value + 1e-9:
        return candidate
    return Fraction(int(value * 10**6) - 1, 10**6)


ColumnKey = tuple[Any, ...]  # ("f", chunk, sources, sink, src, dst), ("u", chunk, src, dst) or ("rounds",)


class _FlowLP:
    """Columns, by key: ("f", chunk, sources, sink, src, dst) flows, ("u", chunk, src, dst) usage, ("rounds",)."""

    ROUNDS = ("rounds",)

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.links = [(link.src, link.dst) for link in topology.link_list]
        self.rows: list[Row[ColumnKey]] = []  # over column keys; merged into orbit columns when solved
        self.load: dict[tuple[int, int], dict[tuple, float]] = defaultdict(dict)  # link -> usage column -> weight

    def chunk_usage(self, chunk: int, commodities: list[Commodity]) -> dict[tuple[int, int], tuple]:
        """Flow columns for each commodity of a chunk; returns link -> the column of the chunk's use of that link
        (the flow itself for a single commodity, else a usage column >= every flow on the link)."""
        flows_per_link: dict[tuple[int, int], list[tuple]] = defaultdict(list)
        for commodity in commodities:
            sources = tuple(sorted(commodity.sources))
            # flow into a source or out of the sink is never useful: no column for it
            cols = {(a, b): ("f", chunk, sources, commodity.sink, a, b) for a, b in self.links
                    if b not in commodity.sources and a != commodity.sink}
            self._conservation(commodity, cols)
            for link, col in cols.items():
                flows_per_link[link].append(col)
        if len(commodities) == 1:
            return {link: cols[0] for link, cols in flows_per_link.items()}
        usage: dict[tuple[int, int], tuple] = {}
        for link, flows in flows_per_link.items():
            usage[link] = ("u", chunk, *link)
            for f in flows:  # u >= f: a link carries a chunk once for all its destinations
                self.rows.append(at_least(Lin.of(usage[link]), Lin.of(f)))
        return usage

    def _conservation(self, commodity: Commodity, cols: dict[tuple[int, int], tuple]) -> None:
        # in(r) - out(r) = [r == sink] for every rank that is not a source
        into: dict[int, list[ColumnKey]] = defaultdict(list)
        out_of: dict[int, list[ColumnKey]] = defaultdict(list)
        for (a, b), col in cols.items():
            into[b].append(col)
            out_of[a].append(col)
        for r in range(self.topology.num_ranks):
            if r not in commodity.sources:
                rhs = 1.0 if r == commodity.sink else 0.0
                if into[r] or out_of[r] or rhs:
                    self.rows.append(equal(Lin.total(into[r]) - Lin.total(out_of[r]), rhs))

    def add_usage(self, usage: dict[tuple[int, int], tuple], multiplicity: int) -> None:
        for link, col in usage.items():
            self.load[link][col] = self.load[link].get(col, 0.0) + multiplicity

    def at_least(self, usage: dict[tuple[int, int], tuple], count: int) -> None:
        # sum_l usage(l) >= count
        self.rows.append(at_least(Lin.total(usage.values()), float(count)))

    def minimize_rounds(self, moves: list) -> float:
        # capacity: sum of usage on a link <= bw * rounds; on a switch's links <= budget * rounds
        rounds = Lin.of(self.ROUNDS)
        for (a, b), weights in self.load.items():
            self.rows.append(at_most(Lin.weighted(weights.items()), rounds * float(self.topology.bandwidth(a, b))))
        for switch in self.topology.switches:
            shared = Lin.weighted((col, w) for link in switch.links for col, w in self.load.get(link, {}).items())
            if shared.terms:
                self.rows.append(at_most(shared, rounds * float(switch.bandwidth)))
        keys = {key for row in self.rows for key in row.terms} | {self.ROUNDS}
        orbit = orbits(keys, moves)
        column = {key: i for i, key in enumerate(sorted({orbit[k] for k in keys}))}  # type: ignore[type-var]
        column_of = {key: column[orbit[key]] for key in keys}  # a key's orbit column
        # symmetric images of a row become the same row once columns are orbits: keep one of each
        unique: dict[tuple[Any, ...], Row[int]] = {}
        for row in self.rows:
            merged = row.renamed(column_of.__getitem__)
            unique.setdefault((tuple(sorted(merged.terms.items())), merged.lo, merged.hi), merged)
        return _solve_lp(len(column), column[self.ROUNDS], list(unique.values()))


def _solve_lp(num_cols: int, objective: int, rows: list[Row[int]]) -> float:
    """min x[objective] s.t. the rows, x >= 0 (the one LP/MILP builder, solved by HiGHS)."""
    model = MilpModel("bandwidth_bound")
    model.add_columns(num_cols)
    model.set_cost(objective, 1.0)
    for row in rows:
        model.add("flow", row)
    result = model.solve("highs")
    if result.status != "optimal" or result.objective is None:
        raise ImpossibleCollectiveError(f"the bandwidth bound LP did not solve ({result.message or result.status})")
    return float(result.objective)


__all__ = ["Commodity", "ImpossibleCollectiveError", "data_paths", "lower_bound_rounds_per_chunk", "lower_bound_steps"]
