"""`trees(topology, collective, size)`: spanning-tree packing, pipelined (issue 10, item 2).

For every root a set of weighted spanning arborescences; a root's data is cut into chunks and chunk i
travels down tree i mod T. The packing's *rate* is fixed by its most loaded link: moving one unit of data
from every root costs max over links of load(l) * beta(l) microseconds, where load(l) is the summed weight
of the trees (over all roots) that use l. The cut bound (`encodings.cut_bounds`) is a lower bound on the
same quantity, so when the two are equal the packing is certified optimal for AllGather throughput.

Packings:
- cube-shaped tori (all dimensions equal and > 2, 2-D or 3-D) and hypercubes: translation-invariant trees.
  For each sign and each starting dimension, the dimension-ordered tree that walks the first dimension from
  the root, then the next from every node reached, ...; generator (dim j, sign s) is used
  sum_p (k-1) k^p = n-1 times over the trees of sign s, so every link carries (n-1)/degree: the ingress
  bound (other tori go to the flows).
- any other topology without switches: the exact packing by flows (`forest.exact_packing`): the optimal rate
  from Dinkelbach's iteration on max-flows, then integral arborescences grown as in Lovasz's proof of
  Edmonds' theorem; its minimum cut is kept, and the certificate compares the packing's link loads with the
  cut bound of that set (and of the cut bound's own sets).
- topologies with switches, up to `forest.SWITCHED_MAX_RANKS` ranks, whose budgets form a switch fabric
  (`split.relay_graph`): the optimal rate on the graph with the switches as relay nodes, the relays split
  off by edge splitting (`split`), then the exact packing on the rank-to-rank links left. Where rounding
  the link rates would cost the optimum, the packing is made at exact rates with weighted trees; a root's
  chunks then go to its trees in proportion to their weights (largest remainder), interleaved.
- other switched topologies: multiplicative weights. Each root gets `MWU_TREES` minimum spanning
  arborescences (networkx's Edmonds, integer prices exp(ETA * load / cap)); the rate is reported against
  the bound, and certified only when it meets it.
The schedule is made by the time-expanded matching confined to each chunk's tree (`timexp` routes).
ReduceScatter runs AllGather's trees reversed; AllReduce is ReduceScatter then AllGather.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from collsynth.collectives import Collective, make_collective
from collsynth.core.enums import Status
from collsynth.encodings.cut_bounds import cut_bound_us, set_bound_us
from collsynth.schedule import COPY, REDUCE, Algorithm, Step, SynthesisResult, verify
from collsynth.synth.cluster.forest import ExactPacking, exact_packing, switched_packing
from collsynth.synth.cluster.greedy import _reverse, _steps, chunk_megabytes
from collsynth.synth.cluster.timexp import MIB, GreedyError, run_greedy
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import reversed_topology

SUPPORTED = ("allgather", "broadcast", "reducescatter", "allreduce")
MWU_TREES = 4  # arborescences per root for the generic packing
ETA = 16.0  # price growth of the multiplicative weights
PRICE_SCALE = 1_000_000
Tree = dict[int, int]  # child -> parent


@dataclass(frozen=True)
class Packing:
    """Per root, its trees with weights (summing to 1), and how the packing was made."""

    trees: dict[int, list[tuple[float, Tree]]]
    method: str
    cut: tuple[int, ...] = ()  # a minimum cut set that proves the rate (exact packings)

    def link_load(self) -> dict[tuple[int, int], float]:
        load: dict[tuple[int, int], float] = defaultdict(float)
        for weighted in self.trees.values():
            for weight, tree in weighted:
                for child, parent in tree.items():
                    load[(parent, child)] += weight
        return load

    def unit_time_us(self, topology: Topology, unit_mb: float) -> float:
        """Time to move `unit_mb` from every root at the packing's rate: the larger of max_l load(l) * unit_mb *
        beta(l) and, per switch, its links' summed load * unit_mb * beta(switch) / lanes(switch)."""
        load = self.link_load()
        links = max(value * unit_mb * topology.link_map[link].beta_us_per_mb for link, value in load.items())
        switches = (sum(load.get(link, 0.0) for link in sw.links) * unit_mb * sw.beta_us_per_mb / sw.bandwidth
                    for sw in topology.switches)
        return max([links, *switches])


def _shape(topology: Topology) -> tuple[str, tuple[int, ...]] | None:
    name = topology.name
    if name.startswith("reversed(") and name.endswith(")"):  # topologies.symmetry.reversed_topology's spelling
        name = name[len("reversed("):-1]
    base, _, args = name.partition(":")
    args = args.split("@")[0].split("(")[0]
    dims = tuple(int(x) for x in args.replace("x", " ").split()) if args and args[0].isdigit() else ()
    if base == "torus" and dims and min(dims) == max(dims) > 2 and math.prod(dims) == topology.num_ranks:
        return "torus", dims
    if base == "hypercube" and dims and (1 << dims[0]) == topology.num_ranks:
        return "hypercube", dims
    return None


def _coords(rank: int, dims: Sequence[int]) -> tuple[int, ...]:
    out = []
    for d in reversed(dims):
        out.append(rank % d)
        rank //= d
    return tuple(reversed(out))


def _rank(coord: Sequence[int], dims: Sequence[int]) -> int:
    value = 0
    for c, d in zip(coord, dims, strict=True):
        value = value * d + c
    return value


def _ordered_tree(dims: Sequence[int], order: Sequence[tuple[int, int]]) -> Tree:
    # walk dimension order[0] from the root, then order[1] from every node reached, ...
    parent: Tree = {}
    reached = [tuple(0 for _ in dims)]
    for dim, sign in order:
        grown = []
        for start in reached:
            prev = start
            for _ in range(dims[dim] - 1):
                nxt = list(prev)
                nxt[dim] = (nxt[dim] + sign) % dims[dim]
                parent[_rank(nxt, dims)] = _rank(prev, dims)
                prev = tuple(nxt)
                grown.append(prev)
        reached += grown
    return parent


def _symmetric_packing(kind: str, dims: tuple[int, ...], n: int) -> Packing:
    sizes: tuple[int, ...] = (2,) * dims[0] if kind == "hypercube" else dims
    signs: tuple[int, ...] = (1,) if kind == "hypercube" else (1, -1)
    d = len(sizes)
    base = [_ordered_tree(sizes, [((s + j) % d, sign) for j in range(d)]) for sign in signs for s in range(d)]
    trees: dict[int, list[tuple[float, Tree]]] = {}
    for root in range(n):
        shift = _coords(root, sizes)

        def moved(rank: int, shift: tuple[int, ...] = shift, root: int = root) -> int:
            if kind == "hypercube":
                return rank ^ root
            return _rank([(a + b) % k for a, b, k in zip(_coords(rank, sizes), shift, sizes, strict=True)], sizes)

        trees[root] = [(1.0 / len(base), {moved(c): moved(p) for c, p in tree.items()}) for tree in base]
    return Packing(trees, f"translation-invariant dimension-ordered trees ({len(base)} per root)")


def _priced_graph(topology: Topology, root: int, load: dict[tuple[int, int], float], target: float) -> nx.DiGraph:
    # price(l) = exp(ETA * load(l) / (target * rate(l))), as integers (Edmonds is exact on integer weights)
    g = nx.DiGraph()
    for x in topology.link_list:
        if x.dst != root:
            usage = load[(x.src, x.dst)] * x.beta_us_per_mb / target
            g.add_edge(x.src, x.dst, weight=int(PRICE_SCALE * math.exp(min(30.0, ETA * usage))))
    return g


def _mwu_packing(topology: Topology) -> Packing:
    load: dict[tuple[int, int], float] = defaultdict(float)
    trees: dict[int, list[tuple[float, Tree]]] = {r: [] for r in range(topology.num_ranks)}
    target = (topology.num_ranks - 1) * max(x.beta_us_per_mb for x in topology.link_list)
    for _ in range(MWU_TREES):
        for root in range(topology.num_ranks):
            g = _priced_graph(topology, root, load, target)
            try:  # the cheapest spanning arborescence into every rank from root (Edmonds)
                tree = {d: s for s, d in nx.minimum_spanning_arborescence(g, preserve_attrs=False).edges()}
            except nx.NetworkXException:  # networkx occasionally fails on ties: shortest paths instead
                paths = nx.single_source_dijkstra_path(g, root)
                tree = {d: path[-2] for d, path in paths.items() if d != root}
            trees[root].append((1.0 / MWU_TREES, tree))
            for child, parent in tree.items():
                load[(parent, child)] += 1.0 / MWU_TREES
    return Packing(trees, f"multiplicative-weights minimum arborescences ({MWU_TREES} per root)")


def _flow_packing(topology: Topology, exact: ExactPacking | None = None) -> Packing:
    exact = exact or exact_packing(topology)
    if exact.weighted:  # per_root is large (exact rates): each distinct tree once, with its weight
        trees = {root: [(mu / exact.per_root, tree) for mu, tree in weighted] for root, weighted in exact.trees.items()}
    else:
        trees = {root: [(1.0 / exact.per_root, tree) for mu, tree in weighted for _ in range(mu)]
                 for root, weighted in exact.trees.items()}
    distinct = sum(len(w) for w in exact.trees.values())
    rounded = "" if exact.rate == exact.optimal else f", rounded down from the optimal {exact.optimal}"
    if exact.weighted:
        return Packing(trees, f"exact packing by flows at exact link rates (rate {exact.rate} in capacity units, "
                       f"{distinct} distinct trees, multiplicities out of {exact.per_root} per root)", exact.cut)
    return Packing(trees, f"exact packing by flows (rate {exact.rate} of the fastest link{rounded}, "
                   f"{exact.per_root} trees per root, {distinct} distinct)", exact.cut)


def pack(topology: Topology) -> Packing:
    """The tree packing for AllGather from every root (see the module docstring)."""
    shape = _shape(topology)
    if shape is not None:
        return _symmetric_packing(shape[0], shape[1], topology.num_ranks)
    if not topology.switches:
        return _flow_packing(topology)
    split = switched_packing(topology)
    return _mwu_packing(topology) if split is None else _flow_packing(topology, split)


def _routes(packing: Packing, collective: Collective, chunks_per_root: int) -> dict[tuple[int, int], list[int]]:
    """Link -> chunks it carries: chunk i of a root's data follows that root's tree i mod T."""
    routes: dict[tuple[int, int], list[int]] = defaultdict(list)
    orders = {root: _chunk_order([w for w, _ in weighted], chunks_per_root) for root, weighted in packing.trees.items()}
    for c in range(collective.num_chunks):
        (root,) = collective.pre[c]
        weighted = packing.trees[root]
        _, tree = weighted[orders[root][c % chunks_per_root]]
        for child, parent in tree.items():
            routes[(parent, child)].append(c)
    return routes


def _chunk_order(weights: Sequence[float], count: int) -> list[int]:
    """The tree of each of a root's `count` chunks: tree i mod T when the T weights are equal; else shares by
    largest remainder, interleaved by smooth weighted round robin (each tree's chunks spread over the
    sequence, so that every tree keeps its links busy through the pipeline)."""
    if max(weights) - min(weights) <= 1e-12 * max(weights):
        return [i % len(weights) for i in range(count)]
    quotas = [w / sum(weights) * count for w in weights]
    shares = [math.floor(q) for q in quotas]
    for i in sorted(range(len(shares)), key=lambda i: (shares[i] - quotas[i], i))[:count - sum(shares)]:
        shares[i] += 1
    current, order = [0] * len(shares), []
    for _ in range(count):
        current = [c + s for c, s in zip(current, shares, strict=True)]
        pick = max(range(len(shares)), key=lambda i: (current[i], -i))
        current[pick] -= count
        order.append(pick)
    return order


def _symmetric_links(topology: Topology) -> bool:
    """Every link has a reverse of the same cost and every budget a mirrored one (then a packing serves the
    reversed topology as well)."""
    costs = {(x.src, x.dst): (x.alpha_us, x.beta_us_per_mb) for x in topology.link_list}
    budgets = {(sw.links, sw.bandwidth, sw.beta_us_per_mb) for sw in topology.switches}
    mirrored = {(frozenset((d, s) for s, d in sw.links), sw.bandwidth, sw.beta_us_per_mb) for sw in topology.switches}
    return all(costs.get((d, s)) == cost for (s, d), cost in costs.items()) and budgets == mirrored


def _tree_steps(topology: Topology, collective: Collective, chunk_mb: float, chunks: int,
                offset_us: float, packing: Packing) -> tuple[tuple[Step, ...], float]:
    name = collective.name
    if name == "allreduce":
        n = collective.num_ranks
        first, mid = _tree_steps(topology, make_collective("reducescatter", n, chunks), chunk_mb, chunks, offset_us,
                                 packing)
        second, end = _tree_steps(topology, make_collective("allgather", n, chunks), chunk_mb, chunks, mid, packing)
        return first + second, end
    reverse = name == "reducescatter"
    topo = reversed_topology(topology) if reverse else topology
    dual = collective.non_combining_dual() if reverse else collective
    if reverse and not _symmetric_links(topology):
        packing = pack(topo)
    routes = _routes(packing, dual, chunks)
    transfers = run_greedy(topo, dual, chunk_mb, routes=routes)
    if reverse:
        transfers = _reverse(transfers)
    return _steps(transfers, REDUCE if reverse else COPY, offset_us), offset_us + transfers.makespan_us


def trees(topology: Topology, collective: Collective, size_bytes: int = 1 << 30, *,
          chunks_per_tree: int = 4) -> SynthesisResult:
    """Tree packing pipelined into a verified, timed Algorithm; `bound` is the cut bound on the packing's
    unit time and status OPTIMAL when the packing meets it (certified)."""
    if collective.name not in SUPPORTED:
        raise GreedyError(f"trees: {collective.name!r} is not supported; supported: {', '.join(SUPPORTED)} "
                          "(use `synth greedy` for the others)")
    began = time.perf_counter()
    packing = pack(topology)
    per_root = max(len(weighted) for weighted in packing.trees.values())
    chunks = per_root * chunks_per_tree
    coll = make_collective(collective.name, collective.num_ranks, chunks, root=collective.root)
    steps, makespan = _tree_steps(topology, coll, chunk_megabytes(coll, size_bytes), chunks, 0.0, packing)
    # certificate, in the AllGather view: unit = one rank's data (size / n for AllGather's n*C output)
    unit_mb = size_bytes / collective.num_ranks / MIB
    ag = make_collective("allgather", collective.num_ranks, 1)
    alpha = min(x.alpha_us for x in topology.link_list)
    bound = max(cut_bound_us(topology, ag, size_bytes).time_us,
                set_bound_us(topology, ag, size_bytes, packing.cut).time_us if packing.cut else 0.0) - alpha
    rate_time = packing.unit_time_us(topology, unit_mb)
    certified = bool(rate_time <= bound * (1 + 1e-9))
    provenance = {"synthesizer": "trees", "packing": packing.method, "size_bytes": size_bytes,
                  "chunks_per_tree": chunks_per_tree, "makespan_us": makespan, "packing_time_us": rate_time,
                  "cut_bound_us": bound, "certified_optimal": certified}
    algorithm = Algorithm(f"trees-{collective.name}-{topology.name}", topology, coll, steps, provenance)
    verify(algorithm)
    seconds = time.perf_counter() - began
    return SynthesisResult(Status.OPTIMAL if certified else Status.SAT, (algorithm,), bound,
                           "allgather packing time_us", "trees", seconds, {**provenance, "seconds": seconds})
