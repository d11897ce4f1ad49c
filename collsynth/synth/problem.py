"""What the SMT encoding is asked to solve for a collective, and how its answers become `Algorithm`s.

- Non-combining collectives are encoded as they are.
- Reduce and ReduceScatter are the reversed duals of Broadcast and AllGather: an algorithm of the dual on
  the *reversed* topology, run backwards (send c u->v at step t becomes c v->u, op reduce, at step S-1-t),
  is an algorithm of the combining collective. In the dual every rank receives a chunk at most once, so in
  the reverse every rank sends its partial sum once, after everything it sums has arrived.
- AllReduce is ReduceScatter followed by AllGather (steps and rounds add; see `concatenate`), and is
  also encoded directly (`AllReduceEncoding`: which contributions each copy of a chunk holds).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from collsynth.collectives import STANDARD, Collective, custom_collective, make_collective
from collsynth.encodings.sccl_z3 import EncodingError, Schedule, reversed_topology
from collsynth.schedule.algorithm import COPY, REDUCE, Algorithm, Send, Step
from collsynth.schedule.verify import verify
from collsynth.topologies import Topology

DIRECT = "direct"  # encode the collective itself
DUAL = "dual"  # encode the non-combining dual on the reversed topology, then reverse
COMPOSED = "composed"  # AllReduce: ReduceScatter then AllGather


def split_chunks(collective: Collective, factor: int) -> Collective:
    """The collective with every chunk split into `factor` pieces (standard collectives keep their layout:
    chunk factor C becomes factor * C)."""
    if collective.name in STANDARD:
        return make_collective(collective.name, collective.num_ranks, collective.chunks * factor,
                               root=collective.root, inplace=collective.inplace)
    if factor == 1:
        return collective
    split = [(c * factor + j, r, i * factor + j) for c, r, i in collective.inputs for j in range(factor)]
    joined = [(c * factor + j, r, i * factor + j) for c, r, i in collective.outputs for j in range(factor)]
    return custom_collective(collective.name, collective.num_ranks, split, joined, combining=collective.combining,
                             chunks=collective.chunks * factor, input_chunks=collective.input_chunks * factor,
                             output_chunks=collective.output_chunks * factor, inplace=collective.inplace)


def unit(collective: Collective) -> Collective:
    """The collective with one chunk per buffer slot (standard ones: chunk factor 1; custom ones as given)."""
    return collective.with_chunks(1) if collective.name in STANDARD else collective


def strategy(collective: Collective) -> str:
    """How the SMT encoding handles this collective: DIRECT, DUAL or COMPOSED."""
    if not collective.combining:
        return DIRECT
    if collective.name in ("reduce", "reducescatter"):
        return DUAL
    if collective.name == "allreduce":
        return COMPOSED
    raise EncodingError(f"custom combining collective {collective.name!r}: the SMT encoding handles Reduce, "
                        "ReduceScatter and AllReduce only; give a non-combining collective or use `synth milp`")


def encodable(topology: Topology, collective: Collective) -> tuple[Topology, Collective]:
    """The (topology, collective) the encoding solves: the collective itself (non-combining ones, and AllReduce
    for its direct encoding) or, for Reduce / ReduceScatter, the dual on the reversed topology."""
    if strategy(collective) == DUAL:
        return reversed_topology(topology), collective.non_combining_dual()
    return topology, collective


def allreduce_parts(collective: Collective) -> tuple[Collective, Collective]:
    """AllReduce = ReduceScatter (chunk r*C+i summed at rank r) then AllGather (from rank r to all)."""
    n, c = collective.num_ranks, collective.chunks
    return make_collective("reducescatter", n, c), make_collective("allgather", n, c)


def schedule_to_algorithm(name: str, topology: Topology, collective: Collective, schedule: Schedule,
                          provenance: Mapping[str, Any]) -> Algorithm:
    """The Algorithm for a schedule the encoding found for `encodable(topology, collective)`; verified."""
    if strategy(collective) == DUAL:
        steps = tuple(Step(rounds, tuple(Send(c, v, u, REDUCE) for c, u, v in sends)) for rounds, sends in
                      reversed(schedule))
    else:  # a send is (chunk, src, dst) for a copy or (chunk, src, dst, op)
        steps = tuple(Step(rounds, tuple(Send(s[0], s[1], s[2], s[3] if len(s) > 3 else COPY) for s in sends))
                      for rounds, sends in schedule)
    algorithm = Algorithm(name, topology, collective, steps, dict(provenance))
    verify(algorithm)
    return algorithm


def schedule_to_wire(schedule: Schedule) -> list:
    return [[rounds, [list(s) for s in sends]] for rounds, sends in schedule]


def schedule_from_wire(data: list) -> Schedule:
    return tuple((int(rounds), tuple(tuple(x if isinstance(x, str) else int(x) for x in send) for send in sends))
                 for rounds, sends in data)


def concatenate(name: str, first: Algorithm, second: Algorithm, collective: Collective,
                provenance: Mapping[str, Any]) -> Algorithm:
    """`first`'s steps then `second`'s, as an algorithm of `collective` (chunk ids shared); verified."""
    algorithm = Algorithm(name, first.topology, collective, first.steps + second.steps, dict(provenance))
    verify(algorithm)
    return algorithm


def scaled(algorithm: Algorithm, factor: int) -> Algorithm:
    """The same schedule with every chunk split into `factor` pieces that travel together (rounds x factor):
    (C, S, R) becomes (factor*C, S, factor*R), same R/C. Verified."""
    if factor == 1:
        return algorithm
    old = algorithm.collective
    new = split_chunks(old, factor)
    pieces = _piece_map(old, new, factor)
    steps = tuple(Step(step.rounds * factor, tuple(Send(p, s.src, s.dst, s.op) for s in step.sends
                                                   for p in pieces[s.chunk])) for step in algorithm.steps)
    result = Algorithm(algorithm.name, algorithm.topology, new, steps,
                       {**algorithm.provenance, "scaled_by": factor})
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


def collective_to_wire(collective: Collective) -> dict[str, Any]:
    """A picklable description that rebuilds the same collective (root included) in another process."""
    if collective.name in STANDARD:
        return {"standard": collective.name, "num_ranks": collective.num_ranks, "chunks": collective.chunks,
                "root": collective.root, "inplace": collective.inplace}
    return collective.to_dict()


def collective_from_wire(data: Mapping[str, Any]) -> Collective:
    if "standard" in data:
        return make_collective(data["standard"], data["num_ranks"], data["chunks"], root=data["root"],
                               inplace=data["inplace"])
    return Collective.from_dict(data)
