"""`verify(algorithm)`: replay a schedule chunk by chunk and check it (DESIGN.md, check 1).

Checks, with a message that names the step and the send on failure:
- every send uses an existing link, and its source holds the chunk at the start of the step;
- per step, sends on a link <= bandwidth * rounds, and sends through a switch <= its budget * rounds;
- non-combining collectives copy only; combining ones never add one rank's contribution twice;
- at the end, the postcondition holds (every required (chunk, rank) holds the chunk, or for combining
  collectives the sum of all its contributions).

Both kinds take a vectorised path: non-combining collectives numpy over all sends at once (a rank holds a chunk
from the step after its first reception, `verify_fast`), combining ones one numpy pass per step over packed
contribution bitsets (`verify_sums`); a million sends take seconds. When the fast path finds a fault, the
send-by-send reference replay (`verify_reference`) runs to name the first one, so both give the same messages.
"""

from __future__ import annotations

from collections import Counter

from collsynth.schedule.algorithm import COPY, REDUCE, Algorithm, AlgorithmError
from collsynth.schedule.verify_fast import copy_schedule_is_valid
from collsynth.schedule.verify_sums import sum_schedule_is_valid


def verify(algorithm: Algorithm) -> None:
    """Raise `AlgorithmError` unless the algorithm implements its collective on its topology."""
    if algorithm.topology.num_ranks != algorithm.collective.num_ranks:
        verify_reference(algorithm)
        return
    check = sum_schedule_is_valid if algorithm.collective.combining else copy_schedule_is_valid
    if not check(algorithm):
        verify_reference(algorithm)  # names the first fault
        raise AlgorithmError(f"{algorithm.name}: the schedule does not implement {algorithm.collective.name}")


def verify_reference(algorithm: Algorithm) -> None:
    """`verify`, replaying send by send (the reference the vectorised path is tested against)."""
    topo, coll = algorithm.topology, algorithm.collective
    if topo.num_ranks != coll.num_ranks:
        raise AlgorithmError(f"{algorithm.name}: topology has {topo.num_ranks} ranks, collective "
                             f"{coll.num_ranks}")
    # holds[(chunk, rank)] = the set of ranks whose contribution that rank holds for the chunk
    holds: dict[tuple[int, int], frozenset[int]] = {}
    for c in range(coll.num_chunks):
        for r in coll.pre[c]:
            holds[(c, r)] = frozenset([r]) if coll.combining else frozenset(coll.pre[c])

    for t, step in enumerate(algorithm.steps):
        if step.rounds < 1:
            raise AlgorithmError(f"{algorithm.name}: step {t} has {step.rounds} rounds; every step needs >= 1")
        _check_capacity(algorithm, t)
        updates: dict[tuple[int, int], list[tuple[str, frozenset[int]]]] = {}
        for send in step.sends:
            where = f"{algorithm.name}: step {t}, send {send}"
            if not 0 <= send.chunk < coll.num_chunks:
                raise AlgorithmError(f"{where}: chunk {send.chunk} outside 0..{coll.num_chunks - 1}")
            if not topo.has_link(send.src, send.dst):
                raise AlgorithmError(f"{where}: no link {send.src}->{send.dst} in {topo.name}")
            value = holds.get((send.chunk, send.src))
            if value is None:
                raise AlgorithmError(f"{where}: rank {send.src} does not hold chunk {send.chunk} yet")
            if send.op == REDUCE and not coll.combining:
                raise AlgorithmError(f"{where}: reduce in non-combining collective {coll.name}")
            updates.setdefault((send.chunk, send.dst), []).append((send.op, value))
        for (c, r), ops in updates.items():
            kinds = {op for op, _ in ops}
            if kinds == {COPY}:
                if coll.combining and len({v for _, v in ops}) > 1:
                    raise AlgorithmError(f"{algorithm.name}: step {t}: rank {r} receives different partial sums "
                                         f"of chunk {c} by copy at once")
                holds[(c, r)] = ops[0][1]
                continue
            if COPY in kinds:
                raise AlgorithmError(f"{algorithm.name}: step {t}: rank {r} gets chunk {c} by copy and by reduce "
                                     "in the same step")
            acc = holds.get((c, r))
            if acc is None:
                raise AlgorithmError(f"{algorithm.name}: step {t}: rank {r} reduces into chunk {c} it does not hold")
            for _, value in ops:
                if acc & value:
                    raise AlgorithmError(f"{algorithm.name}: step {t}: rank {r} adds the contribution of ranks "
                                         f"{sorted(acc & value)} to chunk {c} twice")
                acc = acc | value
            holds[(c, r)] = acc

    for c in range(coll.num_chunks):
        full = coll.pre[c]
        for r in sorted(coll.post[c]):
            got = holds.get((c, r))
            if got is None:
                raise AlgorithmError(f"{algorithm.name}: postcondition fails: rank {r} never receives chunk {c}")
            if coll.combining and got != full:
                raise AlgorithmError(f"{algorithm.name}: postcondition fails: rank {r} holds chunk {c} summed over "
                                     f"ranks {sorted(got)}, needs {sorted(full)}")


def _check_capacity(algorithm: Algorithm, t: int) -> None:
    # sends(link) <= bandwidth(link) * rounds; sends(switch) <= budget(switch) * rounds
    step = algorithm.steps[t]
    per_link = Counter((s.src, s.dst) for s in step.sends)
    for (src, dst), count in per_link.items():
        cap = algorithm.topology.bandwidth(src, dst) * step.rounds
        if cap and count > cap:
            raise AlgorithmError(f"{algorithm.name}: step {t}: {count} sends on link {src}->{dst} exceed its "
                                 f"capacity {cap} (bandwidth x {step.rounds} rounds)")
    for switch in algorithm.topology.switches:
        count = sum(per_link[link] for link in switch.links if link in per_link)
        if count > switch.bandwidth * step.rounds:
            raise AlgorithmError(f"{algorithm.name}: step {t}: {count} sends through switch {switch.name!r} exceed "
                                 f"its budget {switch.bandwidth} x {step.rounds} rounds")
