"""The routing instance the MILP encodings work on: a topology and collective seen through a sketch.

Costs follow the alpha-beta model of the simulator (collsynth/sim): one transfer of k chunks of m MB on
link l takes `alpha_l + k * m * beta` microseconds, where beta is the slowest of the link's beta and the
betas of the switches it crosses, and it holds the link and every one of those switches (NVSwitch ports,
shared NICs) for that whole time. Transfers of several chunks (k > 1) are allowed only on inter-node
links (`groupable`), where the sketch lets chunks be sent together to pay alpha once.

Per chunk the instance lists the links it may cross (`ChunkRoutes.arcs`) and, per destination, the
links that can lie on its path there (`ChunkRoutes.paths_to`); see `encodings/sketch.py` for the
`shortest` and `any` policies. The sketch's symmetry becomes a permutation group on ranks and chunks
(`Symmetry`), checked to map the sketched instance onto itself.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from types import MappingProxyType

from collsynth.collectives import Collective
from collsynth.encodings.sketch import Sketch, SketchError
from collsynth.topologies import Topology

Arc = tuple[int, int]
MB = 1 << 20
# a symmetry maps every link onto one whose cost is within this (relative, at least 1 us) of its own
SAME_COST_REL = 1e-9


@dataclass(frozen=True)
class Resource:
    """A budget shared by several links (a switch port, a NIC): one transfer at a time."""
    name: str
    links: frozenset[Arc]
    # "out": all links leave one rank; "in": all enter one rank; "shared": anything else
    port: str
    rank: int | None = None


@dataclass(frozen=True)
class ChunkRoutes:
    chunk: int
    sources: tuple[int, ...]
    targets: tuple[int, ...]
    arcs: tuple[Arc, ...]
    paths_to: Mapping[int, tuple[Arc, ...]]
    # the links on minimum-hop paths to the targets (a subset of `arcs`)
    hop_arcs: tuple[Arc, ...] = ()


@dataclass(frozen=True)
class Symmetry:
    """A group of rank permutations (with the chunk permutations they induce), identity first."""
    rank_perms: tuple[tuple[int, ...], ...]
    chunk_perms: tuple[tuple[int, ...], ...]

    @property
    def order(self) -> int:
        return len(self.rank_perms)

    def map_arc(self, g: int, arc: Arc) -> Arc:
        perm = self.rank_perms[g]
        return perm[arc[0]], perm[arc[1]]


@dataclass(frozen=True)
class RoutingInstance:
    topology: Topology
    collective: Collective
    sketch: Sketch
    chunk_bytes: float
    gpus_per_node: int
    link_cost: Mapping[Arc, float]  # one chunk, us
    link_alpha: Mapping[Arc, float]
    link_beta: Mapping[Arc, float]  # per chunk, us (so a group of k costs alpha + k * beta)
    groupable: frozenset[Arc]
    resources: tuple[Resource, ...]
    chunks: tuple[ChunkRoutes, ...]
    symmetry: Symmetry
    # links on which the sketch prefers few ("min") or many ("max") distinct links in use
    unique_policy: str | None
    unique_links: frozenset[Arc]

    @cached_property
    def resources_of(self) -> Mapping[Arc, tuple[int, ...]]:
        out: dict[Arc, list[int]] = {}
        for i, res in enumerate(self.resources):
            for arc in res.links:
                out.setdefault(arc, []).append(i)
        return MappingProxyType({k: tuple(v) for k, v in out.items()})

    @property
    def max_together(self) -> int:
        return self.sketch.max_together

    def node_of(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def describe(self) -> str:
        arcs = sum(len(c.arcs) for c in self.chunks)
        return (f"{self.collective} on {self.topology.name} ({self.topology.num_ranks} ranks), "
                f"{len(self.chunks)} chunks of {self.chunk_bytes:g} B, {arcs} chunk-link pairs, "
                f"{len(self.resources)} shared budgets, symmetry order {self.symmetry.order}")


def build_instance(topology: Topology, collective: Collective, sketch: Sketch, chunk_bytes: float) -> RoutingInstance:
    """Apply a sketch to a topology and a (non-combining) collective whose chunk factor is the sketch's
    chunkup. Raises SketchError when the sketch does not fit or makes the collective impossible."""
    if collective.combining:
        raise SketchError(f"{collective.name} combines chunks; route its non-combining dual instead")
    if collective.num_ranks != topology.num_ranks:
        raise SketchError(f"collective has {collective.num_ranks} ranks but topology {topology.name!r} has "
                          f"{topology.num_ranks}")
    if chunk_bytes <= 0:
        raise SketchError(f"chunk size must be > 0 bytes, got {chunk_bytes}")
    gpus = sketch.check(topology)
    megabytes = chunk_bytes / MB
    resources = _resources(topology, sketch, gpus)
    res_beta: dict[Arc, float] = {}
    for res_switch in topology.switches:
        for arc in res_switch.links:
            res_beta[arc] = max(res_beta.get(arc, 0.0), res_switch.beta_us_per_mb)
    link_cost, link_alpha, link_beta = {}, {}, {}
    for link in topology.link_list:
        arc = (link.src, link.dst)
        beta = max(link.beta_us_per_mb, res_beta.get(arc, 0.0)) * megabytes
        link_alpha[arc] = link.alpha_us
        link_beta[arc] = beta
        link_cost[arc] = link.alpha_us + beta
    groupable = frozenset(arc for arc in link_cost if arc[0] // gpus != arc[1] // gpus) \
        if sketch.max_together > 1 else frozenset()
    chunks = tuple(_chunk_routes(topology, collective, sketch, gpus, c) for c in range(collective.num_chunks))
    symmetry = _symmetry(topology, collective, sketch, chunks, link_cost, resources)
    unique_links: set[Arc] = set()
    policies = {sw.connections for sw in sketch.switches if sw.connections in ("min", "max")}
    if len(policies) > 1:
        raise SketchError("sketch field 'intra_node.switches[].connections': mixing min and max on one topology "
                          "is not supported; use one policy")
    for sw in sketch.switches:
        if sw.connections in ("min", "max"):
            for node in range(sketch.num_nodes):
                ranks = [node * gpus + r for r in sw.ranks]
                unique_links.update((a, b) for a in ranks for b in ranks if a != b)
    return RoutingInstance(
        topology=topology, collective=collective, sketch=sketch, chunk_bytes=chunk_bytes, gpus_per_node=gpus,
        link_cost=MappingProxyType(link_cost), link_alpha=MappingProxyType(link_alpha),
        link_beta=MappingProxyType(link_beta), groupable=groupable, resources=resources, chunks=chunks,
        symmetry=symmetry, unique_policy=policies.pop() if policies else None,
        unique_links=frozenset(unique_links))


def _resources(topology: Topology, sketch: Sketch, gpus: int) -> tuple[Resource, ...]:
    """Topology switches plus the switch ports a sketch's switch strategy implies (deduplicated)."""
    found: list[Resource] = []
    seen: set[frozenset[Arc]] = set()

    def add(name: str, links: frozenset[Arc]) -> None:
        if links in seen or len(links) < 2:
            return
        seen.add(links)
        srcs = {a for a, _ in links}
        dsts = {b for _, b in links}
        if len(srcs) == 1:
            found.append(Resource(name, links, "out", next(iter(srcs))))
        elif len(dsts) == 1:
            found.append(Resource(name, links, "in", next(iter(dsts))))
        else:
            found.append(Resource(name, links, "shared"))

    for switch in topology.switches:
        if switch.bandwidth == 1:
            add(switch.name, frozenset(switch.links))
    for i, sw in enumerate(sketch.switches):
        for node in range(sketch.num_nodes):
            ranks = [node * gpus + r for r in sw.ranks]
            for r in ranks:
                add(f"sketch_switch{i}_out_{r}", frozenset((r, o) for o in ranks if o != r))
                add(f"sketch_switch{i}_in_{r}", frozenset((o, r) for o in ranks if o != r))
    return tuple(found)


def _chunk_graph(topology: Topology, sketch: Sketch, gpus: int, sources: tuple[int, ...]) -> dict[int, list[int]]:
    """Out-neighbours a chunk starting at `sources` may use: links inside a node, and inter-node links
    leaving a source node on a sketched connection from an allowed sender."""
    src_nodes = {s // gpus for s in sources}
    pairs = set(sketch.connection_pairs(gpus)) if sketch.num_nodes > 1 else set()
    allowed_senders: set[int] | None = None
    if sketch.senders:
        allowed_senders = set()
        for s in sources:
            allowed = sketch.senders_of(s % gpus)
            allowed_senders.update((s // gpus) * gpus + a for a in (allowed or ()))
    out: dict[int, list[int]] = {r: [] for r in range(topology.num_ranks)}
    for link in topology.link_list:
        u, v = link.src, link.dst
        if u // gpus == v // gpus or (u // gpus in src_nodes and (u % gpus, v % gpus) in pairs
              and (allowed_senders is None or u in allowed_senders)):
            out[u].append(v)
    return out


def _bfs(out: Mapping[int, list[int]], starts: tuple[int, ...], n: int) -> list[float]:
    dist = [float("inf")] * n
    queue = deque(starts)
    for s in starts:
        dist[s] = 0
    while queue:
        u = queue.popleft()
        for v in out[u]:
            if dist[v] == float("inf"):
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _chunk_routes(topology: Topology, collective: Collective, sketch: Sketch, gpus: int, chunk: int) -> ChunkRoutes:
    n = topology.num_ranks
    sources = tuple(sorted(collective.pre[chunk]))
    targets = tuple(sorted(collective.post[chunk] - collective.pre[chunk]))
    out = _chunk_graph(topology, sketch, gpus, sources)
    dist = _bfs(out, sources, n)
    reverse: dict[int, list[int]] = {r: [] for r in range(n)}
    for u, vs in out.items():
        for v in vs:
            reverse[v].append(u)
    source_set = set(sources)
    shortest: dict[int, tuple[Arc, ...]] = {}
    on_paths: set[int] = set(sources)
    for d in targets:
        if dist[d] == float("inf"):
            raise SketchError(f"the sketch makes {collective.name} impossible: chunk {chunk} (from rank "
                              f"{sources[0]}) cannot reach rank {d}; allow more inter-node connections "
                              "(internode_conn) or senders (gpus_to_sender_rev_map)")
        to_d = _bfs(reverse, (d,), n)
        arcs = tuple(sorted((u, v) for u in range(n) for v in out[u]
                            if dist[u] + 1 + to_d[v] == dist[d] and v not in source_set))
        shortest[d] = arcs
        on_paths.update(v for _, v in arcs)
    hop_arcs = tuple(sorted({a for arcs in shortest.values() for a in arcs}))
    if sketch.route_policy == "shortest":
        return ChunkRoutes(chunk, sources, targets, hop_arcs, MappingProxyType(shortest), hop_arcs)
    arcs_any = tuple(sorted((u, v) for u in on_paths for v in out[u] if v in on_paths and v not in source_set))
    paths_to = {d: tuple(a for a in arcs_any if a[0] != d) for d in targets}
    return ChunkRoutes(chunk, sources, targets, arcs_any, MappingProxyType(paths_to), hop_arcs)


def _symmetry(topology: Topology, collective: Collective, sketch: Sketch, chunks: tuple[ChunkRoutes, ...],
              link_cost: Mapping[Arc, float], resources: tuple[Resource, ...]) -> Symmetry:
    n = topology.num_ranks
    identity = tuple(range(n))
    generators = []
    for offset, size in sketch.symmetry:
        perm = tuple((r % size + offset) % size + (r // size) * size for r in range(n))
        if perm != identity:
            generators.append(((offset, size), perm))
    by_key: dict[tuple[frozenset[int], frozenset[int]], list[int]] = {}
    for c in range(collective.num_chunks):
        by_key.setdefault((collective.pre[c], collective.post[c]), []).append(c)
    res_sets = {res.links for res in resources}
    gen_chunk_perms = []
    for (offset, size), perm in generators:
        where = f"sketch field 'symmetry': [offset {offset}, group {size}]"
        for arc, cost in link_cost.items():
            arc_image = (perm[arc[0]], perm[arc[1]])
            if arc_image not in link_cost or abs(link_cost[arc_image] - cost) > SAME_COST_REL * max(1.0, cost):
                raise SketchError(f"{where} is not a symmetry of the topology: link {arc[0]}->{arc[1]} maps to "
                                  f"{arc_image[0]}->{arc_image[1]}, which is missing or costs differently")
        for res in resources:
            if frozenset((perm[a], perm[b]) for a, b in res.links) not in res_sets:
                raise SketchError(f"{where} is not a symmetry of the topology: switch/NIC {res.name!r} has no image")
        chunk_perm = []
        for c in range(collective.num_chunks):
            key = (frozenset(perm[r] for r in collective.pre[c]), frozenset(perm[r] for r in collective.post[c]))
            same = by_key.get(key)
            own = by_key[(collective.pre[c], collective.post[c])]
            if not same or len(same) != len(own):
                raise SketchError(f"{where} is not a symmetry of {collective.name}: chunk {c} has no image")
            chunk_perm.append(same[own.index(c)])
        for c, image in enumerate(chunk_perm):
            mapped = {(perm[a], perm[b]) for a, b in chunks[c].arcs}
            if mapped != set(chunks[image].arcs):
                raise SketchError(f"{where} is not a symmetry of the sketch: the links chunk {c} may use do not map "
                                  f"onto those of chunk {image} (check internode_conn and gpus_to_sender_rev_map)")
        gen_chunk_perms.append(tuple(chunk_perm))
    # closure of the generated group
    rank_perms: list[tuple[int, ...]] = [identity]
    chunk_perms: list[tuple[int, ...]] = [tuple(range(collective.num_chunks))]
    index = {identity: 0}
    frontier = [0]
    while frontier:
        nxt = []
        for i in frontier:
            for (_, gperm), gchunk in zip(generators, gen_chunk_perms, strict=True):
                rp = tuple(gperm[x] for x in rank_perms[i])
                if rp not in index:
                    index[rp] = len(rank_perms)
                    rank_perms.append(rp)
                    chunk_perms.append(tuple(gchunk[x] for x in chunk_perms[i]))
                    nxt.append(index[rp])
        frontier = nxt
    return Symmetry(tuple(rank_perms), tuple(chunk_perms))


def shortest_times(adjacency: Mapping[int, Iterable[tuple[int, float]]], sources: Iterable[int]) -> dict[int, float]:
    """Dijkstra from several sources: the earliest time each reachable rank can be reached (adjacency:
    rank -> (next rank, cost) pairs). One implementation for every MILP bound and heuristic."""
    dist = {s: 0.0 for s in sources}
    heap = [(0.0, s) for s in dist]
    heapq.heapify(heap)
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist.get(u, float("inf")):
            continue
        for v, w in adjacency.get(u, ()):
            if d + w < dist.get(v, float("inf")):
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return dist


def arc_adjacency(arcs: Iterable[Arc], cost: Mapping[Arc, float]) -> dict[int, list[tuple[int, float]]]:
    """rank -> (next rank, cost) over `arcs`, the input `shortest_times` takes."""
    out: dict[int, list[tuple[int, float]]] = {}
    for a in arcs:
        out.setdefault(a[0], []).append((a[1], cost[a]))
    return out
