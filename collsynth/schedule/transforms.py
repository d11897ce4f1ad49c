"""Transforms of schedules (DESIGN.md, `schedule/`): each exists once, and each returns a verified `Algorithm`.

- `scaled(algorithm, k)`: every chunk split into k pieces that travel together ((C, S, R) -> (kC, S, kR));
  the collective side of it is `Collective.split(k)`.
- `concatenate(name, first, second, collective)`: `first`'s steps then `second`'s (AllReduce =
  ReduceScatter then AllGather).
- `reversed_into_reduction(dual, topology, collective)`: a schedule of the non-combining dual (Broadcast,
  AllGather) on the reversed topology, run backwards with copies turned into reductions, is a schedule of
  the combining collective (Reduce, ReduceScatter) on the topology.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

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


def reversed_into_reduction(dual: Algorithm, topology: Topology, collective: Collective, name: str | None = None,
                            provenance: Mapping[str, Any] | None = None) -> Algorithm:
    """The combining `collective` on `topology` from a schedule `dual` of its non-combining dual on the reversed
    topology: send c u->v at step t becomes c v->u, a reduction, at step S-1-t. In the dual every rank receives a
    chunk at most once, so in the reverse every rank sends its partial sum once, after all it sums arrived."""
    steps = tuple(Step(step.rounds, tuple(Send(s.chunk, s.dst, s.src, Op.REDUCE) for s in step.sends))
                  for step in reversed(dual.steps))
    algorithm = Algorithm(name or dual.name, topology, collective, steps,
                          dict(dual.provenance if provenance is None else provenance))
    verify(algorithm)
    return algorithm
