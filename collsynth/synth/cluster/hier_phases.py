"""Phase schedules for the hierarchical composition: step-based `Algorithm`s of a small collective on one
group's sub-topology (a node, or a rail of same-index GPUs across nodes).

Sources, each a function (sub-topology, collective, time limit) -> Algorithm or None where it does not apply:
- `direct`: one step; every rank sends straight to every rank that needs its data (needs those links);
- `ring`: the ring 0 -> 1 -> ... -> k-1 -> 0 (k-1 steps for AllGather; needs the ring's links);
- `doubling`: recursive doubling, log2(k) steps (k a power of two, links to every partner);
- `greedy`: the time-expanded greedy (`greedy.py`), one step per distinct start time, timings dropped;
- `smt`: the SCCL least-steps synthesizer (`least_steps`), where it answers within the time limit;
- `oneshot` (AllReduce only): one step, every rank sends its whole buffer to every other rank, which
  reduces (the all-pairs one-phase AllReduce: k-1 times the bytes, one alpha; for small sizes).
ReduceScatter is the reversed AllGather (on the reversed sub-topology), AllReduce is ReduceScatter then
AllGather; AllToAll has `direct` and `greedy`. Every schedule returned has passed `verify()`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

from collsynth.collectives import Collective, make_collective
from collsynth.core.enums import Op
from collsynth.core.errors import CollsynthError
from collsynth.schedule import Algorithm, Send, Step, verify
from collsynth.schedule.transforms import concatenate, reversed_into_reduction
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import reversed_topology

PHASE_SOURCES = ("direct", "ring", "doubling", "greedy", "smt", "oneshot")
SMT_MAX_RANKS = 8  # the least-steps encoding answers in seconds up to about this many ranks
GREEDY_PHASE_BYTES = 1 << 26  # buffer size the greedy phases are timed at (their order, not their timing, is kept)

Builder = Callable[[Topology, Collective, float], "Algorithm | None"]


def min_rounds(topology: Topology, sends: Sequence[Send]) -> int:
    """The fewest rounds that carry `sends` in one step: max over links of ceil(sends / bandwidth) and over
    switches of ceil(sends through it / budget) (verify's capacity rule)."""
    per_link = Counter((s.src, s.dst) for s in sends)
    rounds = max((math.ceil(k / max(1, topology.bandwidth(a, b))) for (a, b), k in per_link.items()), default=1)
    for switch in topology.switches:
        through = sum(per_link[x] for x in switch.links if x in per_link)
        if through:
            rounds = max(rounds, math.ceil(through / switch.bandwidth))
    return max(1, rounds)


def _step(topology: Topology, sends: list[Send]) -> Step:
    return Step(min_rounds(topology, sends), tuple(sends))


def _checked(name: str, topology: Topology, collective: Collective, steps: list[list[Send]]) -> Algorithm | None:
    if any(not topology.has_link(s.src, s.dst) for sends in steps for s in sends):
        return None
    algorithm = Algorithm(name, topology, collective, tuple(_step(topology, s) for s in steps if s))
    verify(algorithm)
    return algorithm


def _allgather_direct(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    k, c = coll.num_ranks, coll.chunks
    sends = [Send(r * c + i, r, d) for r in range(k) for i in range(c) for d in range(k) if d != r]
    return _checked("direct", topology, coll, [sends])


def _allgather_ring(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    k, c = coll.num_ranks, coll.chunks
    # at step t rank r forwards the chunks of rank r - t to r + 1
    steps = [[Send(((r - t) % k) * c + i, r, (r + 1) % k) for r in range(k) for i in range(c)] for t in range(k - 1)]
    return _checked("ring", topology, coll, steps)


def _allgather_doubling(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    k, c = coll.num_ranks, coll.chunks
    if k < 2 or k & (k - 1):
        return None
    steps, distance = [], 1
    while distance < k:
        # rank r holds the chunks of the ranks that agree with it above bit log2(distance); it sends them all
        steps.append([Send(o * c + i, r, r ^ distance) for r in range(k) for o in range(k)
                      if (o ^ r) < distance for i in range(c)])
        distance *= 2
    return _checked("doubling", topology, coll, steps)


def _greedy(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    from collsynth.synth.cluster.greedy import greedy

    timed = greedy(topology, coll, GREEDY_PHASE_BYTES).algorithm
    assert timed is not None
    steps = [[Send(s.chunk, s.src, s.dst, s.op) for s in step.sends] for step in timed.steps]
    return _checked("greedy", topology, coll, steps)


def _allgather_smt(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    from collsynth.synth.least_steps import least_steps

    if coll.num_ranks > SMT_MAX_RANKS:
        return None
    try:
        found = least_steps(topology, coll, time_limit=limit).algorithm
    except CollsynthError:
        return None
    return None if found is None else _checked("smt", topology, coll, [list(s.sends) for s in found.steps])


def _alltoall_direct(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    k, c = coll.num_ranks, coll.chunks
    sends = [Send((s * k + d) * c + i, s, d) for s in range(k) for d in range(k) if d != s for i in range(c)]
    return _checked("direct", topology, coll, [sends])


def _allreduce_oneshot(topology: Topology, coll: Collective, limit: float) -> Algorithm | None:
    k = coll.num_ranks
    sends = [Send(c, r, d, Op.REDUCE) for r in range(k) for d in range(k) if d != r for c in range(coll.num_chunks)]
    return _checked("oneshot", topology, coll, [sends])


ALLGATHER: dict[str, Builder] = {"direct": _allgather_direct, "ring": _allgather_ring,
                                 "doubling": _allgather_doubling, "greedy": _greedy, "smt": _allgather_smt}
ALLTOALL: dict[str, Builder] = {"direct": _alltoall_direct, "greedy": _greedy}


def phase_schedule(source: str, topology: Topology, collective: Collective,
                   time_limit: float = 20.0) -> Algorithm | None:
    """The `source` schedule of `collective` (allgather, reducescatter, allreduce or alltoall) on the
    sub-topology, or None where that source does not apply (missing links, shape, solver time-out)."""
    name, k, c = collective.name, collective.num_ranks, collective.chunks
    if k == 1:
        return Algorithm(source, topology, collective, ())
    if source == "oneshot":
        return _allreduce_oneshot(topology, collective, time_limit) if name == "allreduce" else None
    if name == "alltoall":
        builder = ALLTOALL.get(source)
        return None if builder is None else builder(topology, collective, time_limit)
    if name == "allgather":
        return ALLGATHER[source](topology, collective, time_limit)
    if name == "reducescatter":
        reverse = reversed_topology(topology)
        dual = ALLGATHER[source](reverse, make_collective("allgather", k, c), time_limit)
        return None if dual is None else reversed_into_reduction(dual, topology, collective, source)
    if name == "allreduce":
        first = phase_schedule(source, topology, make_collective("reducescatter", k, c), time_limit)
        second = phase_schedule(source, topology, make_collective("allgather", k, c), time_limit)
        if first is None or second is None:
            return None
        return concatenate(source, first, second, collective, {})
    raise CollsynthError(f"hierarchical: no phase schedules for {name!r}")

