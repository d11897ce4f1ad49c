"""Switch removal by edge splitting, so that switched fabrics get the exact tree packing (in the spirit of
ForestColl; our own construction).

collsynth models a switch as a budget over a set of rank-to-rank links. When every budget is a complete
bipartite set (sources x destinations) and the budgets of each link can be ordered into a chain (sorted by
|sources| - |destinations|: a rank's port first, then leaf uplinks, spine downlinks, and the receiver's port
last), the fabric is a graph: each budget is one arc of capacity lanes / beta between two *relay* nodes
(the switches), a link u -> v is the walk u -> ... -> v through its chain, and links without budgets stay
direct arcs. Relays are found by identifying the head of each budget with the tail of the next one in every
chain (union-find); the model is refused when a relay would be a rank, a budget would loop, or a link is
slower than the budgets it passes.

Then every relay z is split off: a pair of arcs (x -> z, z -> y) gives m of its capacity to a new arc
x -> y, for the largest m that keeps every rank v at connectivity lambda(s, v) >= k from the source s of
the packing (checked by max-flows); the arcs left at z are then deleted (checked again). By the splitting
theorem of Bang-Jensen, Frank and Jackson (rooted arc-connectivity is preserved by a complete splitting at
a node with in-degree >= out-degree) a complete splitting exists for switches whose ports are symmetric.
Fan-outs (relays with more capacity out than in, e.g. a NIC shared by several GPUs) go first. Only splits
whose walk is (a contiguous part of) some link's chain are made, so every arc left between
ranks is a real link, and a packing on the split graph loads every budget at most its capacity. When the
splitting gets stuck, the caller falls back (and its certificate is checked against the cut bound anyway).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from collsynth.synth.cluster.flow import FlowNetwork
from collsynth.topologies import Topology

Label = tuple[int, ...]  # the budgets (>= 0) or the one link (-1 - index) an arc stands for, in walk order


@dataclass(frozen=True)
class RelayGraph:
    """Ranks 0..n-1 and relays n..num_nodes-1; arcs (tail, head, label, capacity) with integer capacities in
    units of the fastest rate / `scale`; `allowed` the (tail, label, head) walks that are part of a link."""

    n: int
    num_nodes: int
    arcs: tuple[tuple[int, int, Label, int], ...]
    allowed: frozenset[tuple[int, Label, int]]
    link_of: dict[Label, tuple[int, int]]  # a full chain -> its link
    slowest: int = 1  # the capacity that stands for the slowest rate (exactly, whatever the rounding)


class _UnionFind:
    def __init__(self, size: int) -> None:
        self.parent = list(range(size))

    def find(self, x: int) -> int:
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        self.parent[self.find(a)] = self.find(b)


RATE_DENOMINATOR = 16  # link rates are kept to 1/16 of the slowest one, rounded down
# The exact form: ratios of rates given in decimal microseconds per MB (e.g. NVSwitch/IB on ndv4, 52.5 / 3.833
# = 52500 / 3833) have denominators of a few thousand; this recovers them from the floats.
EXACT_DENOMINATOR = 1 << 24


def integer_rates(rates: list[float], denominator: int = RATE_DENOMINATOR) -> list[int]:
    """Rates as integers proportional to them: exact when each is a multiple of 1/denominator of the slowest
    (up to float noise), else rounded down (so a packing within these capacities is within the real ones)."""
    slowest = min(rates)
    ratios = []
    for rate in rates:
        close = Fraction(rate / slowest).limit_denominator(denominator)
        exact = abs(float(close) - rate / slowest) <= 1e-9 * rate / slowest
        ratios.append(close if exact else Fraction(math.floor(rate / slowest * denominator), denominator))
    scale = math.lcm(*(r.denominator for r in ratios))
    caps = [int(r * scale) for r in ratios]
    common = math.gcd(*caps)
    return [c // common for c in caps]


def _chains(topology: Topology) -> dict[tuple[int, int], list[int]] | None:
    """Each link's budgets in walk order; None when a budget is not a complete bipartite set."""
    chains: dict[tuple[int, int], list[int]] = {(x.src, x.dst): [] for x in topology.link_list}
    keys = []
    for b, sw in enumerate(topology.switches):
        sources, dests = {a for a, _ in sw.links}, {d for _, d in sw.links}
        if len(sw.links) != sum(1 for a in sources for d in dests if a != d):
            return None
        keys.append((len(sources) - len(dests), sw.name))
        for link in sw.links:
            chains[link].append(b)
    for chain in chains.values():
        chain.sort(key=lambda b: keys[b])
    return chains


def _relay_nodes(topology: Topology, chains: dict[tuple[int, int], list[int]]) -> list[int] | None:
    """The node of every budget end (tail of b at 2b, head at 2b + 1): ranks keep their number, relays from n
    up; a budget's tail is its sender when it has one sender and starts a chain (its head likewise); None
    when two ranks or a budget's two ends would be one node, or a relay would be a rank mid-walk."""
    n, budgets = topology.num_ranks, len(topology.switches)
    senders = [len({a for a, _ in sw.links}) for sw in topology.switches]
    receivers = [len({d for _, d in sw.links}) for sw in topology.switches]
    ends = _UnionFind(n + 2 * budgets)  # rank r, tail of budget b at n + 2b, its head at n + 2b + 1
    for (u, v), chain in chains.items():
        if chain:
            if senders[chain[0]] == 1:
                ends.union(n + 2 * chain[0], u)
            if receivers[chain[-1]] == 1:
                ends.union(n + 2 * chain[-1] + 1, v)
            for a, b in zip(chain, chain[1:], strict=False):
                ends.union(n + 2 * a + 1, n + 2 * b)
    roots = [ends.find(x) for x in range(n + 2 * budgets)]
    if len({roots[r] for r in range(n)}) < n or any(roots[n + 2 * b] == roots[n + 2 * b + 1] for b in range(budgets)):
        return None
    node = {roots[r]: r for r in range(n)}
    for root in roots[n:]:
        node.setdefault(root, len(node))
    ends_node = [node[root] for root in roots[n:]]
    for chain in chains.values():
        inner = [ends_node[2 * b] for b in chain[1:]] + [ends_node[2 * b + 1] for b in chain[:-1]]
        if any(w < n for w in inner):  # a link that passes through another rank: not a switch fabric
            return None
    return ends_node


def relay_graph(topology: Topology, denominator: int = RATE_DENOMINATOR) -> RelayGraph | None:
    """The fabric as a graph of ranks and relays (see the module docstring), its capacities `integer_rates`
    to `denominator`; None when it is not one."""
    n, budgets = topology.num_ranks, len(topology.switches)
    chains = _chains(topology)
    ends = None if chains is None else _relay_nodes(topology, chains)
    if chains is None or ends is None:
        return None
    caps = integer_rates([sw.bandwidth / sw.beta_us_per_mb for sw in topology.switches]
                         + [1 / x.beta_us_per_mb for x in topology.link_list], denominator)
    arcs: dict[Label, tuple[int, int, Label, int]] = {(b,): (ends[2 * b], ends[2 * b + 1], (b,), caps[b])
                                                       for b in range(budgets)}
    allowed: set[tuple[int, Label, int]] = set()
    link_of: dict[Label, tuple[int, int]] = {}
    gates: dict[tuple[int, int], int] = {}  # (rank, budget end) -> label of the arc joining them
    for i, x in enumerate(topology.link_list):
        chain = chains[(x.src, x.dst)]
        if not chain:
            arcs[(-1 - i,)] = (x.src, x.dst, (-1 - i,), caps[budgets + i])
            link_of[(-1 - i,)] = (x.src, x.dst)
            continue
        if caps[budgets + i] < min(caps[b] for b in chain):  # a link slower than its budgets: not a walk
            return None
        walk, steps = [x.src], list(chain)
        if ends[2 * chain[0]] != x.src:  # a shared entry (several senders): a gate arc from the sender
            gate = gates.setdefault((x.src, 2 * chain[0]), budgets + len(gates))
            arcs[(gate,)] = (x.src, ends[2 * chain[0]], (gate,), caps[chain[0]])
            walk.append(ends[2 * chain[0]])
            steps.insert(0, gate)
        walk += [ends[2 * b + 1] for b in chain]
        if ends[2 * chain[-1] + 1] != x.dst:  # a shared exit: a gate arc to the receiver
            gate = gates.setdefault((x.dst, 2 * chain[-1] + 1), budgets + len(gates))
            arcs[(gate,)] = (ends[2 * chain[-1] + 1], x.dst, (gate,), caps[chain[-1]])
            walk.append(x.dst)
            steps.append(gate)
        allowed.update((walk[a], tuple(steps[a:b]), walk[b]) for a in range(len(steps))
                       for b in range(a + 1, len(steps) + 1))
        link_of[tuple(steps)] = (x.src, x.dst)
    num_nodes = max(max(ends, default=0) + 1, n)
    return RelayGraph(n, num_nodes, tuple(arcs.values()), frozenset(allowed), link_of, min(caps))


class _Splitter:
    """The relay graph as a flow network with source s (arcs s -> rank of `per_rank`), splitting relays."""

    def __init__(self, graph: RelayGraph, per_rank: int, scale: int) -> None:
        self.graph, self.k = graph, graph.n * per_rank
        self.s = graph.num_nodes
        self.net = FlowNetwork(graph.num_nodes + 1)
        self.arc: dict[tuple[int, Label, int], int] = {}
        for a, b, label, cap in graph.arcs:
            self._add(a, label, b, cap * scale)
        for u in range(graph.n):
            self.net.add_arc(self.s, u, per_rank)

    def _add(self, a: int, label: Label, b: int, cap: int) -> int:
        key = (a, label, b)
        if key not in self.arc:
            self.arc[key] = self.net.add_arc(a, b, 0)
        self.net.cap[self.arc[key]] += cap
        return self.arc[key]

    def connected(self) -> bool:
        # lambda(s, v) >= k for every rank v (relays need nothing)
        return all(self.net.max_flow(self.s, v, self.k)[0] >= self.k for v in range(self.graph.n))

    def _move(self, into: int, out: int, new: int, amount: int) -> None:
        cap = self.net.cap
        cap[into] -= amount
        cap[out] -= amount
        cap[new] += amount

    def _try(self, into: int, out: int, new: int, amount: int) -> bool:
        self._move(into, out, new, amount)
        if self.connected():
            return True
        self._move(into, out, new, -amount)
        return False

    def _split_pair(self, into: int, out: int, new: int) -> None:
        # the largest m <= min(cap(into), cap(out)) that keeps the connectivity (binary search)
        cap = self.net.cap
        most = min(cap[into], cap[out])
        if self._try(into, out, new, most):
            return
        low, high = 0, most - 1
        while low < high:
            mid = (low + high + 1) // 2
            if self._try(into, out, new, mid):
                self._move(into, out, new, -mid)
                low = mid
            else:
                high = mid - 1
        if low:
            self._try(into, out, new, low)

    def split_off(self, z: int) -> bool:
        """Split every pair at relay z, then delete what is left there; False if the connectivity is lost."""
        cap = self.net.cap
        ins = [(a, label, arc) for (a, label, b), arc in list(self.arc.items()) if b == z]
        outs = [(label, b, arc) for (a, label, b), arc in list(self.arc.items()) if a == z]
        for q, y, out in outs:
            for x, p, into in ins:
                if not cap[out]:
                    break
                if x == y or not cap[into] or (x, p + q, y) not in self.graph.allowed:
                    continue
                self._split_pair(into, out, self._add(x, p + q, y, 0))
        for _, _, arc in ins + [(0, label, arc) for label, _, arc in outs]:
            cap[arc] = 0
        return self.connected()

    def rank_caps(self) -> dict[tuple[int, int], int]:
        """The split graph's arcs between ranks, as link -> capacity."""
        caps: dict[tuple[int, int], int] = {}
        for (a, label, b), arc in self.arc.items():
            if a < self.graph.n and b < self.graph.n and self.net.cap[arc]:
                link = self.graph.link_of[label]
                caps[link] = caps.get(link, 0) + self.net.cap[arc]
        return caps


def split_relays(graph: RelayGraph, rate: Fraction) -> dict[tuple[int, int], int] | None:
    """Rank-to-rank link capacities (scaled by rate's denominator) after splitting off every relay, keeping
    lambda(s, v) >= n * rate.numerator; None when the splitting gets stuck."""
    splitter = _Splitter(graph, rate.numerator, rate.denominator)
    if not splitter.connected():
        return None
    surplus = [0] * graph.num_nodes  # out-capacity minus in-capacity
    for a, b, _, cap in graph.arcs:
        surplus[a] += cap
        surplus[b] -= cap
    # fan-outs (more out than in, where the splitting theorem does not apply) first, while the switches they
    # feed are still whole and can forward what a fan-out gives to one rank
    for z in sorted(range(graph.n, graph.num_nodes), key=lambda z: (-surplus[z], z)):
        if not splitter.split_off(z):
            return None
    return splitter.rank_caps()
