"""Symmetry of a topology (DESIGN.md, `topologies/`: automorphisms, orbits) and its reversal.

An automorphism is a rank permutation that keeps every link's bandwidth and every switch. An *instance*
symmetry also carries the data: each chunk, identified by where it starts and where it must end (its pre
and post rank sets), maps to a chunk with the images of those sets. Solvers use instance symmetries to
look for schedules that are invariant under them (one variable per orbit)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar

import networkx as nx
import numpy as np
from networkx.algorithms.isomorphism import DiGraphMatcher

from collsynth.topologies.model import Link, Switch, Topology

# At most this many non-identity automorphisms are collected (fully connected graphs have n! of them).
MAX_AUTOMORPHISMS = 8

Symmetry = tuple[tuple[int, ...], tuple[int, ...]]  # (rank map, chunk map)
ChunkSignature = tuple[frozenset[int], frozenset[int]]  # (pre, post) of one chunk
Item = TypeVar("Item", bound=Hashable)


def reversed_topology(topology: Topology) -> Topology:
    """Every link u->v becomes v->u (same costs); switches cover the reversed links. Used for the duals
    of Reduce / ReduceScatter and by the bandwidth bound."""
    links = tuple(Link(x.dst, x.src, x.bandwidth, x.alpha_us, x.beta_us_per_mb, x.kind) for x in topology.link_list)
    switches = tuple(Switch(s.name, frozenset((b, a) for a, b in s.links), s.bandwidth, s.beta_us_per_mb)
                     for s in topology.switches)
    return Topology(f"reversed({topology.name})", topology.num_ranks, links, switches, topology.machines,
                    topology.nics, description=topology.description)


def same_links(a: Topology, b: Topology) -> bool:
    """The same links (with bandwidths) and switches, whatever the names and costs."""
    def shape(t: Topology) -> tuple[list[Any], list[Any]]:
        return (sorted((x.src, x.dst, x.bandwidth) for x in t.link_list),
                sorted((tuple(sorted(s.links)), s.bandwidth) for s in t.switches))
    return shape(a) == shape(b)


def is_automorphism(topology: Topology, ranks: Sequence[int]) -> bool:
    """`ranks` (rank r -> ranks[r]) keeps every link's bandwidth and maps every switch onto a switch."""
    for link in topology.link_list:
        if topology.bandwidth(ranks[link.src], ranks[link.dst]) != link.bandwidth:
            return False
    switches = {(s.links, s.bandwidth) for s in topology.switches}
    return all((frozenset((ranks[a], ranks[b]) for a, b in links), bw) in switches for links, bw in switches)


def candidate_automorphisms(topology: Topology, limit: int) -> list[tuple[int, ...]]:
    """Rank maps worth checking: every rotation first (preferred: a cyclic symmetry), then up to 20 * limit
    isomorphisms from the graph matcher (which could enumerate n! of them)."""
    n = topology.num_ranks
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for link in topology.link_list:
        graph.add_edge(link.src, link.dst, bandwidth=link.bandwidth)
    candidates = [tuple((r + k) % n for r in range(n)) for k in range(1, n)]
    matcher = DiGraphMatcher(graph, graph, edge_match=lambda a, b: a["bandwidth"] == b["bandwidth"])
    for examined, mapping in enumerate(matcher.isomorphisms_iter()):
        if examined > 20 * limit:
            break
        candidates.append(tuple(mapping[r] for r in range(n)))
    return candidates


def instance_symmetries(topology: Topology, chunks: Sequence[ChunkSignature],
                        limit: int = MAX_AUTOMORPHISMS) -> list[Symmetry]:
    """Non-identity symmetries of an instance as (rank map, chunk map): automorphisms of the topology with
    the chunk permutation carrying each chunk's (pre, post) sets to their images. At most `limit`; a
    rotation is preferred when the graph has one."""
    by_signature: dict[ChunkSignature, list[int]] = defaultdict(list)
    for c, signature in enumerate(chunks):
        by_signature[signature].append(c)
    identity = tuple(range(topology.num_ranks))
    found: list[Symmetry] = []
    seen: set[tuple[int, ...]] = set()
    for ranks in candidate_automorphisms(topology, limit):
        if ranks == identity or ranks in seen or not is_automorphism(topology, ranks):
            continue
        chunk_map = _chunk_permutation(len(chunks), ranks, by_signature)
        if chunk_map is not None:
            seen.add(ranks)
            found.append((ranks, chunk_map))
            if len(found) >= limit:
                break
    return found


def _chunk_permutation(num_chunks: int, ranks: Sequence[int],
                       by_signature: dict[ChunkSignature, list[int]]) -> tuple[int, ...] | None:
    chunk_map = [0] * num_chunks
    for (pre, post), members in by_signature.items():
        image = by_signature.get((frozenset(ranks[r] for r in pre), frozenset(ranks[r] for r in post)))
        if image is None or len(image) != len(members):
            return None
        for a, b in zip(members, image, strict=True):
            chunk_map[a] = b
    return tuple(chunk_map)


def is_single_cycle(ranks: Sequence[int]) -> bool:
    """The permutation is one cycle through every rank (a rotation of some ring)."""
    seen, r = 0, 0
    while True:
        r = ranks[r]
        seen += 1
        if r == 0:
            return seen == len(ranks)


def orbits(items: Iterable[Item], moves: Sequence[Callable[[Item], Item]]) -> dict[Item, Item]:
    """Item -> the smallest item of its orbit under the group generated by `moves` (which map items to items).
    THE union-find of the code base (SMT encodings, the flow-LP bound and the routing MILP use it)."""
    listed = list(items)
    index = {x: i for i, x in enumerate(listed)}
    images = [np.fromiter((index[move(x)] for x in listed), dtype=np.int64, count=len(listed)) for move in moves]
    root = joined_classes(len(listed), images)
    smallest: dict[int, Item] = {}
    for x, r in zip(listed, root.tolist(), strict=True):
        low = smallest.get(r)
        if low is None or x < low:  # type: ignore[operator]
            smallest[r] = x
    return {x: smallest[r] for x, r in zip(listed, root.tolist(), strict=True)}


def joined_classes(count: int, images: Sequence[np.ndarray]) -> np.ndarray:
    """Union-find over the indices 0..count-1 joining i with images[k][i] for every k, on numpy arrays: per
    index, the lowest index of its class. Each round links every class root to the lowest root it is joined
    with (a root only ever points lower, so the lowest index of a class is its final root), then jumps
    pointers until every index points at a root; it stops when a round joins nothing."""
    parent = np.arange(count, dtype=np.int64)
    joined = True
    while joined:
        joined = False
        for image in images:
            a, b = parent, parent[image]  # roots of both ends (parent is compressed here)
            apart = a != b
            if not apart.any():
                continue
            joined = True
            low, high = np.minimum(a[apart], b[apart]), np.maximum(a[apart], b[apart])
            np.minimum.at(parent, high, low)  # parent[high] is high itself: a root
            while True:
                jumped = parent[parent]
                if np.array_equal(jumped, parent):
                    break
                parent = jumped
    return parent
