"""Exact AllGather tree packing by flows (in the spirit of ForestColl; our own construction).

Add a source s with an arc s -> u of capacity x to every rank u; links keep their rate 1/beta as capacity.
Every rank must receive x from each of the n - 1 others, so a packing at rate x exists iff the augmented
graph holds n * x arc-disjoint spanning arborescences rooted at s (each uses exactly one s-arc, since there
are n * x units of them: it is a spanning tree of the ranks rooted at that arc's rank). By Edmonds' theorem
that holds iff every rank v has connectivity lambda(s, v) >= n * x, i.e. cap(into S) >= x * (n - |S|) for
every set S of ranks: the cut bound. So:

1. The optimal rate x* = min_S cap(into S) / (n - |S|), found by Dinkelbach's iteration on max-flows: start at
   the ingress ratio; while some rank v has lambda(s, v) < n * x, its minimum cut S gives a smaller ratio.
2. Scale to integers (x* = P/Q: s-arcs P, links cap * Q, k = n * P trees) and build the trees one at a time
   as in Lovasz's proof of Edmonds' theorem: grow a tree from its s-arc, adding an arc (a, b) from the tree
   to a new rank only if the rest still has lambda(s, b) >= k - mu (then every rank does: removing (a, b)
   only lowers cuts that contain b); the lemma guarantees a safe arc exists for mu = 1. A tree is first
   tried with multiplicity mu = its root's remaining P (one tree carrying all of the root's data), then
   halved down to 1. Rates whose P exceeds `trees_per_root_limit(n)` (MAX_TREES / n, at least 8) are
   rounded down to p/q with p <= that.
3. Link rates are integers to 1/16 of the slowest (`split.integer_rates`). Where that rounding, or the
   limit on P, lowers the optimum (2xndv4: NVSwitch/IB = 52500/3833, and a rank's ingress, port + NIC, is
   the bound), the packing is redone at the exact rates, *weighted*: P is then in the tens of thousands,
   so each tree, once grown safe for multiplicity 1, takes the largest multiplicity that keeps every rank's
   connectivity (binary search on max-flows); the distinct trees stay few (29 on 2xndv4 for P = 56333).

Topologies with switches: `switched_packing` computes the rate on the relay graph (switches as nodes) and
splits the relays off (`split`) before growing the trees on the links left.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from collsynth.synth.cluster.flow import FlowNetwork
from collsynth.synth.cluster.split import (
    EXACT_DENOMINATOR,
    RATE_DENOMINATOR,
    RelayGraph,
    integer_rates,
    relay_graph,
    split_relays,
)
from collsynth.synth.cluster.timexp import GreedyError
from collsynth.topologies import Topology

Tree = dict[int, int]  # child -> parent
MAX_TREES = 1024  # n * P trees in all: beyond this the flow checks (n per tree arc) cost too much
MIN_TREES_PER_ROOT = 8  # ... but small ranks counts may always use this many per root
SWITCHED_MAX_RANKS = 64  # relay splitting costs ~n max-flows per split pair: minutes past this


@dataclass(frozen=True)
class ExactPacking:
    """Per root, its trees with integer multiplicities (each root's sum is `per_root`); the rate x* and the
    minimum cut (sink side) that proves it optimal."""

    trees: dict[int, list[tuple[int, Tree]]]
    per_root: int
    rate: Fraction  # data per rank per unit time, in units of the fastest link's rate
    cut: tuple[int, ...]
    optimal: Fraction  # x*, which `rate` equals unless more than max_per_root trees per root were needed
    weighted: bool = False  # packed at exact link rates: few distinct trees with large multiplicities


def _link_capacities(topology: Topology, denominator: int = RATE_DENOMINATOR) -> dict[tuple[int, int], int]:
    # cap(l) proportional to rate(l) = 1 / beta(l), as integers (`split.integer_rates`)
    caps = integer_rates([1 / x.beta_us_per_mb for x in topology.link_list], denominator)
    return {(x.src, x.dst): c for x, c in zip(topology.link_list, caps, strict=True)}


def _network(n: int, caps: dict[tuple[int, int], int], per_rank: int,
             scale: int) -> tuple[FlowNetwork, dict[tuple[int, int], int], list[int]]:
    """The augmented network: node n is s; returns it, link -> arc, and the s-arc of every rank."""
    net = FlowNetwork(n + 1)
    arcs = {link: net.add_arc(link[0], link[1], cap * scale) for link, cap in sorted(caps.items())}
    source_arcs = [net.add_arc(n, u, per_rank) for u in range(n)]
    return net, arcs, source_arcs


def optimal_rate(n: int, caps: dict[tuple[int, int], int]) -> tuple[Fraction, tuple[int, ...]]:
    """x* = min over rank sets S of cap(into S) / (n - |S|) (Dinkelbach on max-flows) and its set S."""
    return optimal_rate_graph(n, n, [(a, b, c) for (a, b), c in sorted(caps.items())])


def optimal_rate_graph(n: int, num_nodes: int, arcs: list[tuple[int, int, int]]) -> tuple[Fraction, tuple[int, ...]]:
    """The same on a graph whose nodes n..num_nodes-1 are relays (switches): only ranks need the data, and a
    cut T (sink side, relays included) gives the ratio cap(into T) / (n - |T & ranks|)."""
    into = [0] * n
    for _, v, c in arcs:
        if v < n:
            into[v] += c
    best = min(range(n), key=lambda v: into[v])
    cut: tuple[int, ...]
    rate, cut = Fraction(into[best], n - 1), (best,)
    while True:
        net = FlowNetwork(num_nodes + 1)
        for a, b, c in arcs:
            net.add_arc(a, b, c * rate.denominator)
        for u in range(n):
            net.add_arc(num_nodes, u, rate.numerator)
        need = n * rate.numerator
        for v in range(n):
            flow, residual = net.max_flow(num_nodes, v, need)
            if flow < need:  # the minimum cut around v is below the current ratio
                inside = set(net.sink_side(num_nodes, residual)) - {num_nodes}
                capacity = sum(c for a, b, c in arcs if b in inside and a not in inside)
                side = tuple(sorted(u for u in inside if u < n))
                rate, cut = Fraction(capacity, n - len(side)), side
                break
        else:
            return rate, cut


def _grow(net: FlowNetwork, arcs: dict[tuple[int, int], int], source_arc: int, root: int, k: int,
          mu: int, depth_cap: int) -> Tree | None:
    """One tree from `root` carrying `mu` units, keeping lambda(s, v) >= k - mu for every rank; None if stuck.
    On success the capacities are reduced by mu along the tree (and its s-arc)."""
    n = net.num_nodes - 1
    cap, goal = net.cap, k - mu
    cap[source_arc] -= mu
    if net.max_flow(n, root, goal)[0] < goal:
        cap[source_arc] += mu
        return None
    parent: Tree = {}
    depth = {root: 0}
    taken: list[int] = []
    while len(depth) < n:
        options = sorted(((depth[a], -cap[arc], a, b, arc) for (a, b), arc in arcs.items()
                          if a in depth and b not in depth and cap[arc] >= mu), key=lambda o: o[:2])
        for _, _, a, b, arc in options[:depth_cap]:
            cap[arc] -= mu
            if net.max_flow(n, b, goal)[0] >= goal:
                parent[b], depth[b] = a, depth[a] + 1
                taken.append(arc)
                break
            cap[arc] += mu
        else:
            for arc in taken:
                cap[arc] += mu
            cap[source_arc] += mu
            return None
    return parent


def _fewer_trees(rate: Fraction, most: int) -> Fraction:
    # the largest p/q <= rate with p <= most (the rate itself when its numerator is small enough)
    if rate.numerator <= most or rate == 0:
        return rate
    return Fraction(most, math.ceil(most / rate))


def trees_per_root_limit(n: int) -> int:
    """The most trees per root a packing of n ranks builds before its rate is rounded down."""
    return max(MIN_TREES_PER_ROOT, MAX_TREES // max(n, 1))


def exact_packing(topology: Topology, max_per_root: int | None = None) -> ExactPacking:
    """The optimal-rate AllGather packing of a switchless topology (see the module docstring). When the optimal
    rate P/Q needs more than `max_per_root` trees per root, the packing runs at the largest rate p/q below it
    with p <= max_per_root (then `rate` < `optimal` and the certificate fails, honestly)."""
    n = topology.num_ranks
    if n < 2:
        return ExactPacking({0: [(1, {})]}, 1, Fraction(1), (), Fraction(1))
    caps = _link_capacities(topology)
    best, cut = optimal_rate(n, caps)
    rate = _fewer_trees(best, max_per_root or trees_per_root_limit(n))
    _require_connected(topology, rate, cut)
    weighted = False
    exact = _link_capacities(topology, EXACT_DENOMINATOR)
    if max_per_root is None and (rate < best or exact != caps):
        exact_best, exact_cut = optimal_rate(n, exact)
        if rate / min(caps.values()) < exact_best / min(exact.values()):  # rounding cost the optimum
            caps, best, cut, rate, weighted = exact, exact_best, exact_cut, exact_best, True
    trees = pack_arborescences(n, {link: cap * rate.denominator for link, cap in caps.items()}, rate.numerator,
                               weighted=weighted)
    return ExactPacking(trees, rate.numerator, rate, cut, best, weighted)


def _require_connected(topology: Topology, rate: Fraction, cut: tuple[int, ...]) -> None:
    if rate == 0:
        raise GreedyError(f"trees: {topology.name} is not strongly connected (no rank set {list(cut)[:8]} can be "
                          "reached from the others); add links or use `synth greedy`")


def pack_arborescences(n: int, caps: dict[tuple[int, int], int], per_root: int, *,
                       weighted: bool = False) -> dict[int, list[tuple[int, Tree]]]:
    """`per_root` spanning arborescences from every rank, with multiplicities, within the integer `caps`
    (already scaled by the rate's denominator); feasible when every rank has lambda(s, v) >= n * per_root.
    `weighted` (for a large per_root, an exact rate): every tree takes the largest multiplicity it can, so
    that the distinct trees stay few however large per_root is."""
    net, arcs, source_arcs = _network(n, caps, per_root, 1)
    left = [per_root] * n
    k = n * per_root
    trees: dict[int, list[tuple[int, Tree]]] = {r: [] for r in range(n)}
    while k:
        for root in range(n):
            if not left[root]:
                continue
            mu, tree = left[root], None
            while mu > 1 and tree is None:  # the root's whole share in one tree, else half of it, ...
                tree = _grow(net, arcs, source_arcs[root], root, k, mu, 3)
                mu = mu if tree is not None else mu // 2
            if tree is None:
                mu = 1
                tree = _grow(net, arcs, source_arcs[root], root, k, 1, len(arcs))
            if tree is None:  # Edmonds' theorem says this cannot happen
                raise GreedyError(f"exact packing: no safe arborescence from rank {root} at k={k}")
            if weighted:
                mu += _more(net, [arcs[(a, b)] for b, a in tree.items()] + [source_arcs[root]], k - mu,
                            left[root] - mu)
            trees[root].append((mu, tree))
            left[root] -= mu
            k -= mu
    return trees


def _more(net: FlowNetwork, used: list[int], k: int, most: int) -> int:
    """The largest extra multiplicity m <= most (binary search) that the tree over arcs `used` (its s-arc
    included) can take while every rank keeps lambda(s, v) >= k - m; its capacities are reduced by m."""
    cap, n = net.cap, net.num_nodes - 1

    def move(m: int) -> None:
        for arc in used:
            cap[arc] -= m

    def safe(m: int) -> bool:
        move(m)
        ok = all(net.max_flow(n, v, k - m)[0] >= k - m for v in range(n))
        move(-m)
        return ok

    low, high = 0, min([most, *(cap[arc] for arc in used)])
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if safe(mid) else (low, mid - 1)
    move(low)
    return low


def _graph_rate(graph: RelayGraph) -> tuple[Fraction, tuple[int, ...]]:
    return optimal_rate_graph(graph.n, graph.num_nodes, [(a, b, c) for a, b, _, c in graph.arcs])


def switched_packing(topology: Topology, max_per_root: int | None = None) -> ExactPacking | None:
    """The exact packing of a topology with switches: the optimal rate on its relay graph, the relays split
    off (`split`), then arborescences on the links left; None when the fabric is not a relay graph, has more
    than SWITCHED_MAX_RANKS ranks, or the splitting gets stuck (the caller falls back)."""
    n = topology.num_ranks
    graph = relay_graph(topology) if 2 <= n <= SWITCHED_MAX_RANKS else None
    if graph is None:
        return None
    best, cut = _graph_rate(graph)
    rate = _fewer_trees(best, max_per_root or trees_per_root_limit(n))
    _require_connected(topology, rate, cut)
    weighted = False
    exact = relay_graph(topology, EXACT_DENOMINATOR) if max_per_root is None else None
    if exact is not None and (rate < best or exact.arcs != graph.arcs):
        exact_best, exact_cut = _graph_rate(exact)
        if rate / graph.slowest < exact_best / exact.slowest:  # rounding cost the optimum: the exact rates
            graph, best, cut, rate, weighted = exact, exact_best, exact_cut, exact_best, True
    caps = split_relays(graph, rate)
    if caps is None:
        return None
    return ExactPacking(pack_arborescences(n, caps, rate.numerator, weighted=weighted), rate.numerator, rate, cut,
                        best, weighted)
