"""A small integer max-flow (Dinic) for the exact tree packing, where one run makes thousands of flow queries
on a graph of ~100 nodes: plain lists, no per-query graph building, an optional `limit` that stops as soon as
the flow reaches it (the packing only asks "is the connectivity at least k?").

Arcs come in pairs: arc 2i is the i-th added arc, 2i + 1 its reverse (capacity 0).
"""

from __future__ import annotations

from collections.abc import Sequence


class FlowNetwork:
    """Nodes 0..n-1, arcs with integer capacities in `cap` (mutable between queries)."""

    def __init__(self, num_nodes: int) -> None:
        self.num_nodes = num_nodes
        self.out: list[list[int]] = [[] for _ in range(num_nodes)]
        self.head: list[int] = []
        self.cap: list[int] = []

    def add_arc(self, u: int, v: int, capacity: int) -> int:
        """Add u -> v and its reverse; returns the arc's index."""
        arc = len(self.head)
        self.head += [v, u]
        self.cap += [capacity, 0]
        self.out[u].append(arc)
        self.out[v].append(arc + 1)
        return arc

    def max_flow(self, source: int, sink: int, limit: int | None = None) -> tuple[int, list[int]]:
        """The max flow value (or `limit` once reached) and the residual capacities."""
        residual = list(self.cap)
        goal = limit if limit is not None else sum(residual[a] for a in self.out[source])
        flow = 0
        while flow < goal:
            level = _levels(self.out, self.head, residual, source, self.num_nodes, sink)
            if level[sink] < 0:
                break
            cursor = [0] * self.num_nodes
            while flow < goal:
                pushed = _augment(self.out, self.head, residual, level, cursor, source, sink, goal - flow)
                if not pushed:
                    break
                flow += pushed
        return flow, residual

    def sink_side(self, source: int, residual: Sequence[int]) -> list[int]:
        """Nodes not reachable from `source` in the residual graph (a minimum cut's sink side after a max flow)."""
        level = _levels(self.out, self.head, residual, source, self.num_nodes)
        return [v for v in range(self.num_nodes) if level[v] < 0]


def _levels(out: list[list[int]], head: list[int], residual: Sequence[int], source: int, n: int,
            sink: int = -1) -> list[int]:
    """BFS levels from `source` in the residual graph; nodes beyond the sink's level stay at -1."""
    level = [-1] * n
    level[source] = 0
    queue = [source]
    for u in queue:
        if sink >= 0 and level[sink] >= 0 and level[u] >= level[sink]:
            break
        for arc in out[u]:
            v = head[arc]
            if residual[arc] > 0 and level[v] < 0:
                level[v] = level[u] + 1
                queue.append(v)
    return level


def _augment(out: list[list[int]], head: list[int], residual: list[int], level: list[int], cursor: list[int],
             source: int, sink: int, most: int) -> int:
    """One augmenting path in the level graph (iterative DFS with per-node cursors); the amount pushed."""
    path: list[int] = []
    u = source
    while True:
        if u == sink:
            amount = min(min(map(residual.__getitem__, path)), most)
            for arc in path:
                residual[arc] -= amount
                residual[arc ^ 1] += amount
            return amount
        arcs = out[u]
        i, end, next_level = cursor[u], len(arcs), level[u] + 1
        while i < end:
            arc = arcs[i]
            if residual[arc] > 0 and level[head[arc]] == next_level:
                break
            i += 1
        cursor[u] = i
        if i < end:
            path.append(arc)
            u = head[arc]
            continue
        if not path:
            return 0
        level[u] = -1  # dead end: prune it from this phase
        u = head[path.pop() ^ 1]
        cursor[u] += 1
