"""Transforms of schedules (DESIGN.md, `schedule/`): each exists once, and each returns a verified `Algorithm`.

- `scaled(algorithm, k)`: every chunk split into k pieces that travel together ((C, S, R) -> (kC, S, kR));
  the collective side of it is `Collective.split(k)`.
- `concatenate(name, first, second, collective)`: `first`'s steps then `second`'s (AllReduce =
  ReduceScatter then AllGather).
- `reversed_sends(sends)`: THE reversal into a reduction, on sends as columns (`TimedSends`): a schedule of
  the non-combining dual (Broadcast, AllGather) on the reversed topology, run backwards with copies turned
  into reductions, is a schedule of the combining collective (Reduce, ReduceScatter) on the topology. Every
  level reverses through it: `reversed_into_reduction` (Algorithm steps, the step number as the time), the
  MILP's transfer DAG (times and dependencies, which it re-schedules) and the cluster greedy's timed
  transfers.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collsynth.collectives import Collective
from collsynth.core.enums import Op
from collsynth.schedule.algorithm import Algorithm, Send, Step
from collsynth.schedule.verify import verify
from collsynth.topologies import Topology


def scaled(algorithm: Algorithm, factor: int) -> Algorithm:
    """The same schedule with every chunk split into `factor` pieces that travel together (rounds x factor):
    (C, S, R) becomes (factor*C, S, factor*R), same R/C. Verified."""
    if factor == 1:
        return algorithm
    old = algorithm.collective
    new = old.split(factor)
    pieces = _piece_map(old, new, factor)
    steps = tuple(Step(step.rounds * factor, tuple(Send(p, s.src, s.dst, s.op) for s in step.sends
                                                   for p in pieces[s.chunk])) for step in algorithm.steps)
    result = Algorithm(algorithm.name, algorithm.topology, new, steps, {**algorithm.provenance, "scaled_by": factor})
    verify(result)
    return result


def _piece_map(old: Collective, new: Collective, factor: int) -> dict[int, list[int]]:
    # Chunks with the same (pre, post) are interchangeable; the j-th of a class maps to pieces j*f..j*f+f-1.
    def classes(coll: Collective) -> dict[tuple[frozenset[int], frozenset[int]], list[int]]:
        found: dict[tuple[frozenset[int], frozenset[int]], list[int]] = defaultdict(list)
        for c in range(coll.num_chunks):
            found[(coll.pre[c], coll.post[c])].append(c)
        return found

    new_classes = classes(new)
    pieces: dict[int, list[int]] = {}
    for signature, members in classes(old).items():
        images = new_classes[signature]
        for j, c in enumerate(members):
            pieces[c] = images[j * factor:(j + 1) * factor]
    return pieces


def concatenate(name: str, first: Algorithm, second: Algorithm, collective: Collective,
                provenance: Mapping[str, Any]) -> Algorithm:
    """`first`'s steps then `second`'s, as an algorithm of `collective` (chunk ids shared); verified."""
    algorithm = Algorithm(name, first.topology, collective, first.steps + second.steps, dict(provenance))
    verify(algorithm)
    return algorithm


@dataclass(frozen=True)
class TimedSends:
    """Sends as columns (numpy arrays, one row per send): chunk[i] moves from src[i] to dst[i] over
    [start[i], start[i] + duration[i]]. `after[i]`, where the order is a dependency graph (the MILP's
    transfers), lists the sends that send i waits for; `makespan` is the end of the schedule."""

    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    start: np.ndarray
    duration: np.ndarray
    makespan: float
    after: tuple[tuple[int, ...], ...] | None = None


def reversed_sends(sends: TimedSends) -> TimedSends:
    """Reversal into a reduction: chunk c u->v over [s, s+d] becomes c v->u (a reduction) over [T-s-d, T-s];
    a send that waited for others is waited for by them. In the dual every rank receives a chunk at most once,
    so in the reverse every rank sends its partial sum once, after all it sums have arrived."""
    after = None
    if sends.after is not None:
        waiting: list[list[int]] = [[] for _ in sends.after]
        for t, deps in enumerate(sends.after):
            for d in deps:
                waiting[d].append(t)
        after = tuple(tuple(w) for w in waiting)
    start = sends.makespan - sends.start - sends.duration
    return TimedSends(sends.chunk, sends.dst, sends.src, start, sends.duration, sends.makespan, after)


def reversed_into_reduction(dual: Algorithm, topology: Topology, collective: Collective, name: str | None = None,
                            provenance: Mapping[str, Any] | None = None) -> Algorithm:
    """The combining `collective` on `topology` from a schedule `dual` of its non-combining dual on the reversed
    topology (`reversed_sends`, each step one unit of time): send c u->v at step t becomes c v->u, a reduction,
    at step S-1-t. Verified."""
    flat = [send for step in dual.steps for send in step.sends]
    step_of = np.repeat(np.arange(len(dual.steps)), [len(step.sends) for step in dual.steps])
    reverse = reversed_sends(TimedSends(np.array([s.chunk for s in flat], dtype=np.int64),
                                        np.array([s.src for s in flat], dtype=np.int64),
                                        np.array([s.dst for s in flat], dtype=np.int64),
                                        step_of, np.ones(len(flat), dtype=np.int64), len(dual.steps)))
    steps = _steps_by_start(reverse, [step.rounds for step in reversed(dual.steps)])
    algorithm = Algorithm(name or dual.name, topology, collective, steps,
                          dict(dual.provenance if provenance is None else provenance))
    verify(algorithm)
    return algorithm


def _steps_by_start(sends: TimedSends, rounds: Sequence[int]) -> tuple[Step, ...]:
    # step k: the reductions starting at k, in their order within the dual's step
    order = np.argsort(sends.start, kind="stable")
    bounds = np.searchsorted(sends.start[order], np.arange(len(rounds) + 1))
    chunk, src, dst = sends.chunk.tolist(), sends.src.tolist(), sends.dst.tolist()
    return tuple(Step(r, tuple(Send(chunk[i], src[i], dst[i], Op.REDUCE) for i in order[bounds[k]:bounds[k + 1]]))
                 for k, r in enumerate(rounds))
