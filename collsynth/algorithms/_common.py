"""Shared pieces of the hand-written library: the program builder, node layouts, rings, trees.

Every library program is built with the DSL's explicit builder (no global context), through
`new_builder` below, so that two programs can be built side by side.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from collsynth.collectives.spec import Collective
from collsynth.core.errors import CollsynthError
from collsynth.core.limits import MAX_COUNT
from collsynth.language.builder import ProgramBuilder
from collsynth.topologies.model import Topology

PROTOCOLS = ("Simple", "LL", "LL128")

# The DSL's buffer names (MSCCLang spelling); named scratch buffers are any other string.
INPUT = "input"
OUTPUT = "output"

# A bound on the depth-first ring search, so that a topology without a ring fails fast.
RING_SEARCH_BUDGET = 200_000


class AlgorithmError(CollsynthError):
    """A library program asked for a shape or parameter it cannot take (the message says what fits)."""


# --- building --------------------------------------------------------------------------------------

def new_builder(name: str, topology: Topology, collective: Collective, *, instances: int, protocol: str,
                **options: Any) -> ProgramBuilder:
    """The DSL's explicit program builder for one library program."""
    check_common(name, topology, instances=instances, protocol=protocol)
    return ProgramBuilder(name, topology, collective, instances=instances, protocol=protocol, **options)


def check_common(name: str, topology: Topology, *, instances: int, protocol: str, channels: int = 1,
                 chunks: int = 1) -> None:
    if topology.num_ranks < 2:
        raise AlgorithmError(f"{name}: needs at least 2 ranks, the topology has {topology.num_ranks}")
    if instances < 1:
        raise AlgorithmError(f"{name}: instances must be >= 1, got {instances}")
    if channels < 1:
        raise AlgorithmError(f"{name}: channels must be >= 1, got {channels}")
    if chunks < 1:
        raise AlgorithmError(f"{name}: chunks must be >= 1, got {chunks}")
    if protocol not in PROTOCOLS:
        raise AlgorithmError(f"{name}: unknown protocol {protocol!r}; use one of {', '.join(PROTOCOLS)}")


def refuse_inplace(name: str, inplace: bool, why: str) -> None:
    if inplace:
        raise AlgorithmError(f"{name}: inplace is not supported ({why}); use inplace=False")


def pieces(start: int, count: int, limit: int = MAX_COUNT) -> list[tuple[int, int]]:
    """Split the chunk range [start, start+count) into (start, count) pieces of at most `limit` chunks,
    as even as possible (one step of the runtime moves at most MAX_COUNT chunks)."""
    parts = -(-count // limit)
    base, extra = divmod(count, parts)
    out, at = [], start
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        out.append((at, size))
        at += size
    return out


def even_split(total: int, parts: int) -> list[tuple[int, int]]:
    """[0, total) as `parts` contiguous (start, count) ranges, sizes differing by at most one."""
    base, extra = divmod(total, parts)
    out, at = [], 0
    for k in range(parts):
        size = base + (1 if k < extra else 0)
        out.append((at, size))
        at += size
    return out


def is_power_of_two(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


# --- nodes -----------------------------------------------------------------------------------------

def node_layout(name: str, topology: Topology, num_nodes: int | None = None) -> tuple[tuple[int, ...], ...]:
    """The ranks of each node, in rank order: from `topology.machines`, or `num_nodes` contiguous blocks of
    ranks when the topology has no node structure. Every node must hold the same number of GPUs."""
    n = topology.num_ranks
    if topology.machines is not None:
        groups: dict[int, list[int]] = {}
        for rank, node in enumerate(topology.machines):
            groups.setdefault(node, []).append(rank)
        layout = tuple(tuple(groups[k]) for k in sorted(groups))
        if num_nodes is not None and num_nodes != len(layout):
            raise AlgorithmError(f"{name}: num_nodes={num_nodes} but topology {topology.name!r} has "
                                 f"{len(layout)} nodes; leave num_nodes out to use the topology's")
    else:
        if num_nodes is None:
            raise AlgorithmError(f"{name}: topology {topology.name!r} has no node structure; pass num_nodes "
                                 "(or use a multi-node topology such as 2xndv2)")
        if num_nodes < 1 or n % num_nodes:
            raise AlgorithmError(f"{name}: {n} ranks do not split into {num_nodes} equal nodes; pick a divisor of {n}")
        per = n // num_nodes
        layout = tuple(tuple(range(k * per, (k + 1) * per)) for k in range(num_nodes))
    sizes = {len(g) for g in layout}
    if len(sizes) != 1:
        raise AlgorithmError(f"{name}: nodes hold different numbers of GPUs ({sorted(sizes)}); every node must "
                             "hold the same number")
    return layout


def require_contiguous_nodes(name: str, layout: Sequence[Sequence[int]]) -> None:
    """Programs that move a node's blocks in one transfer need each node's ranks to be consecutive."""
    for node, ranks in enumerate(layout):
        if list(ranks) != list(range(ranks[0], ranks[0] + len(ranks))):
            raise AlgorithmError(f"{name}: node {node} holds ranks {list(ranks)[:8]}, not a consecutive range; "
                                 "number the ranks node by node")


def require_multi_node(name: str, layout: Sequence[Sequence[int]]) -> None:
    if len(layout) < 2:
        raise AlgorithmError(f"{name}: needs at least 2 nodes, got {len(layout)}; use a multi-node topology or "
                             "pass num_nodes >= 2")


# --- rings -----------------------------------------------------------------------------------------

def ring_links_ok(topology: Topology, order: Sequence[int], both_ways: bool = False) -> bool:
    n = len(order)
    for k in range(n):
        a, b = order[k], order[(k + 1) % n]
        if not topology.has_link(a, b) or (both_ways and not topology.has_link(b, a)):
            return False
    return True


def find_ring(topology: Topology, ranks: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """A cycle through every rank of `ranks` (default: all) over the topology's links: the ranks in the
    given order when that is one, else a depth-first search that prefers links inside a node (so that a
    multi-node ring crosses each node boundary once) and wider links. None if none is found within
    RING_SEARCH_BUDGET search steps."""
    members = tuple(range(topology.num_ranks)) if ranks is None else tuple(ranks)
    if len(members) == 1 or ring_links_ok(topology, members):
        return members
    allowed = set(members)

    def preference(src: int, dst: int) -> tuple[bool, int, int]:
        return (topology.node_of(src) != topology.node_of(dst), -topology.bandwidth(src, dst), dst)

    neighbours = {r: sorted((d for d in topology.out_neighbors[r] if d in allowed), key=partial(preference, r))
                  for r in members}
    start = members[0]
    path, used = [start], {start}
    stack = [iter(neighbours[start])]
    budget = RING_SEARCH_BUDGET
    while stack and budget > 0:
        budget -= 1
        nxt = next(stack[-1], None)
        if nxt is None:
            stack.pop()
            used.discard(path.pop())
            continue
        if nxt in used:
            continue
        if len(path) + 1 == len(members):
            if topology.has_link(nxt, start):
                return tuple(path) + (nxt,)
            continue
        path.append(nxt)
        used.add(nxt)
        stack.append(iter(neighbours[nxt]))
    return None


def resolve_ring(name: str, topology: Topology, ring: Sequence[int] | None, both_ways: bool) -> tuple[int, ...]:
    """The ring order to use: the given one (checked), else one found on the topology."""
    n = topology.num_ranks
    if ring is None:
        found = find_ring(topology)
        if found is None:
            raise AlgorithmError(f"{name}: topology {topology.name!r} has no ring through all {n} ranks; pass ring=")
        order = found
    else:
        order = tuple(int(r) for r in ring)
        if sorted(order) != list(range(n)):
            raise AlgorithmError(f"{name}: ring must list every rank 0..{n - 1} once, got {list(order)}")
    if not ring_links_ok(topology, order, both_ways):
        missing = next((a, b) for k, a in enumerate(order) for b in [order[(k + 1) % n]]
                       if not topology.has_link(a, b) or (both_ways and not topology.has_link(b, a)))
        what = "in both directions " if both_ways else ""
        raise AlgorithmError(f"{name}: ring step {missing[0]}->{missing[1]} needs a link {what}that topology "
                             f"{topology.name!r} lacks; pass another ring= or use channels=1")
    return order


# --- trees -----------------------------------------------------------------------------------------

def binary_tree_parents(n: int) -> tuple[int | None, ...]:
    """A balanced binary tree over positions 0..n-1 (position 0 is the root, with one child).

    A position p > 0 with lowest set bit b sits at height log2(b): its children are p - b/2 and p + b/2,
    so odd positions are the leaves. Its parent is the neighbour at distance b whose lowest set bit is 2b;
    when that one is past n-1 the parent is p - b (whose right slot is free then)."""
    parents: list[int | None] = [None]
    for p in range(1, n):
        low = p & -p
        up = (p ^ low) | (low << 1)
        parents.append(up if up < n else p ^ low)
    return tuple(parents)


def children_of(parents: Sequence[int | None]) -> tuple[tuple[int, ...], ...]:
    kids: list[list[int]] = [[] for _ in parents]
    for p, up in enumerate(parents):
        if up is not None:
            kids[up].append(p)
    return tuple(tuple(k) for k in kids)


def bottom_up(parents: Sequence[int | None]) -> list[int]:
    """Positions ordered so that every child comes before its parent (deepest first)."""
    def depth(p: int) -> int:
        d = 0
        while parents[p] is not None:
            p = parents[p]  # type: ignore[assignment]
            d += 1
        return d
    return sorted(range(len(parents)), key=lambda p: (-depth(p), p))
