"""What the SMT encoding is asked to solve for a collective, and how its answers become `Algorithm`s.

- Non-combining collectives are encoded as they are.
- Reduce and ReduceScatter are the reversed duals of Broadcast and AllGather: an algorithm of the dual on
  the *reversed* topology, run backwards, is an algorithm of the combining collective
  (`collsynth.schedule.reversed_into_reduction`).
- AllReduce is ReduceScatter followed by AllGather (steps and rounds add; `collsynth.schedule.concatenate`),
  and is also encoded directly (`AllReduceEncoding`: which contributions each copy of a chunk holds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import z3

from collsynth.collectives import STANDARD, Collective, display_name, make_collective
from collsynth.core.enums import Op
from collsynth.encodings.sccl_z3 import EncodingError, Schedule
from collsynth.schedule import Algorithm, Send, Step, reversed_into_reduction, verify
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import reversed_topology

DIRECT = "direct"  # encode the collective itself
DUAL = "dual"  # encode the non-combining dual on the reversed topology, then reverse
COMPOSED = "composed"  # AllReduce: ReduceScatter then AllGather


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


def solver_provenance() -> dict[str, Any]:
    return {"synthesizer": "collsynth sccl-z3", "solver": f"z3 {z3.get_version_string()}"}


def algorithm_name(collective: Collective, topology: Topology, chunks: int, steps: int, rounds: int) -> str:
    return f"{display_name(collective.name)}-{topology.name}-c{chunks}-s{steps}-r{rounds}"


def schedule_to_algorithm(name: str, topology: Topology, collective: Collective, schedule: Schedule,
                          provenance: Mapping[str, Any]) -> Algorithm:
    """The Algorithm for a schedule the encoding found for `encodable(topology, collective)`; verified."""
    # a send is (chunk, src, dst) for a copy or (chunk, src, dst, op)
    steps = tuple(Step(rounds, tuple(Send(s[0], s[1], s[2], Op(s[3]) if len(s) > 3 else Op.COPY) for s in sends))
                  for rounds, sends in schedule)
    if strategy(collective) == DUAL:
        enc_topology, enc_collective = encodable(topology, collective)
        dual = Algorithm(name, enc_topology, enc_collective, steps, dict(provenance))
        return reversed_into_reduction(dual, topology, collective)
    algorithm = Algorithm(name, topology, collective, steps, dict(provenance))
    verify(algorithm)
    return algorithm
