"""A quick schedule for the SCCL instance (no solver): shortest-path trees with load balancing. It bounds
the rounds the solver is asked for, and answers when the solver times out."""

from __future__ import annotations

from collections import defaultdict
from functools import partial

from collsynth.collectives import Collective
from collsynth.encodings.sccl_z3 import Schedule, chunk_destinations, distances_from, tight_rounds
from collsynth.topologies import Topology


def greedy_schedule(topology: Topology, collective: Collective, steps: int) -> Schedule | None:
    """A quick valid schedule for a non-combining collective in `steps` steps, or None when the steps are too
    few: every chunk spreads along a shortest-path tree from the ranks holding it (a rank d hops away
    receives it in step d-1), each rank joining the tree through a rank already in it if it can, else the
    least loaded link so far. An upper bound on the rounds, and an answer when the solver times out."""
    load: dict[tuple[int, int, int], float] = defaultdict(float)
    per_step: list[list[tuple[int, int, int]]] = [[] for _ in range(steps)]
    for c, dests in enumerate(chunk_destinations(collective)):
        if not dests:
            continue
        depth = distances_from(topology, collective.pre[c])
        if max(depth[d] for d in dests) > steps:
            return None
        in_tree = set(collective.pre[c])
        for v in sorted(dests, key=lambda r: (depth[r], r)):
            x = v
            while x not in in_tree:  # walk back to the tree; depth-0 ranks are in it
                d = int(depth[x])
                candidates = [u for u in topology.in_neighbors[x] if depth[u] == d - 1]
                parent = min(candidates, key=partial(_parent_rank, in_tree, load, topology, x, d))
                load[(parent, x, d - 1)] += 1
                per_step[d - 1].append((c, parent, x))
                in_tree.add(x)
                x = parent
    return tuple((tight_rounds(topology, sends), tuple(sorted(sends))) for sends in per_step)


def _parent_rank(in_tree: set[int], load: dict[tuple[int, int, int], float], topology: Topology, x: int, d: int,
                 u: int) -> tuple[bool, float, int]:
    # prefer a rank already in the tree, then the least loaded link (relative to its bandwidth), then the lowest rank
    return u not in in_tree, load[(u, x, d - 1)] / topology.bandwidth(u, x), u
