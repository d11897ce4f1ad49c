"""collsynth.ir.deadlock.unreached (Kahn's algorithm a level at a time) against Kahn's algorithm one node at a time:
the same in-degree left on every node, on random graphs with repeated edges, nodes reached from several
predecessors in one level, cycles and never-released waits."""

from __future__ import annotations

from collections import deque

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.ir.deadlock import unreached


def one_at_a_time(total: int, edges: list[tuple[int, int]], blocked: list[int]) -> list[int]:
    indegree = list(blocked)
    succ: list[list[int]] = [[] for _ in range(total)]
    for a, b in edges:
        indegree[b] += 1
        succ[a].append(b)
    ready = deque(n for n in range(total) if indegree[n] == 0)
    while ready:
        for b in succ[ready.popleft()]:
            indegree[b] -= 1
            if indegree[b] == 0:
                ready.append(b)
    return indegree


@st.composite
def graphs(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]], list[int]]:
    total = draw(st.integers(1, 12))
    node = st.integers(0, total - 1)
    edges = draw(st.lists(st.tuples(node, node), max_size=30))
    if draw(st.booleans()):  # mostly acyclic: edges forward only
        edges = [(min(a, b), max(a, b)) for a, b in edges if a != b]
    blocked = draw(st.lists(st.integers(0, 1), min_size=total, max_size=total)) if draw(st.booleans()) else [0] * total
    return total, edges, blocked


@settings(max_examples=300, deadline=None)
@given(graphs())
def test_unreached_is_kahn(graph: tuple[int, list[tuple[int, int]], list[int]]) -> None:
    total, edges, blocked = graph
    src = np.array([a for a, _ in edges], dtype=np.int64)
    dst = np.array([b for _, b in edges], dtype=np.int64)
    left = unreached(total, src, dst, np.array(blocked, dtype=np.int64) if any(blocked) else None)
    assert left.tolist() == one_at_a_time(total, edges, blocked)


def test_a_node_waiting_for_several_nodes_of_one_level_is_released_once() -> None:
    # 0 and 1 are ready together; 2 waits for both (twice for 0), 3 waits for 2
    left = unreached(4, np.array([0, 0, 1, 2]), np.array([2, 2, 2, 3]))
    assert left.tolist() == [0, 0, 0, 0]
    assert unreached(3, np.array([0, 1, 2]), np.array([1, 2, 1])).tolist() == [0, 1, 1]  # a cycle 1 <-> 2
