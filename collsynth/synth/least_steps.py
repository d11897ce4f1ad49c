"""The fewest steps: from the step lower bound upward, the first S with an algorithm."""

from __future__ import annotations

import time
from dataclasses import replace

import z3

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.encodings.bounds import lower_bound_steps
from collsynth.schedule import Attempt, SynthesisResult
from collsynth.synth.instance import SynthesisError, rounds_lower_bound, synthesize_instance
from collsynth.synth.size import check_encodable_size, encoding_fits
from collsynth.topologies import Topology

SYNTHESIZER = "sccl-least-steps"


def least_steps(topology: Topology, collective: Collective, *, rounds: int | None = None,
                time_limit: float | None = None, max_steps: int | None = None,
                deadline: float | None = None) -> SynthesisResult:
    """The algorithm with the fewest steps (and, for those steps, the fewest rounds; with `rounds`: at most
    that many). Tries S = lower bound, lower bound + 1, ... up to `max_steps` (default: lower bound + number
    of ranks). `time_limit` applies to every solver call; `deadline` (a `time.perf_counter()` value) ends the
    search as a whole. Status OPTIMAL when fewer steps are refuted and the rounds proven least for those
    steps, SAT when found otherwise, TIMEOUT when a time-out left a smaller S undecided (the algorithm
    found, if any, then still comes back), UNSAT when no S up to `max_steps` has one. With `rounds`, a step
    takes at least one round, so no S above `rounds` is tried; when a bound proves that no S works at all, the
    UNSAT result comes back at once with the proof in `provenance["proof"]`."""
    start = time.perf_counter()
    low = lower_bound_steps(topology, collective)
    high = max_steps if max_steps is not None else low + topology.num_ranks
    if rounds is not None:
        proof = impossible_in_rounds(topology, collective, rounds, low)
        if proof is not None:
            account = {"chunks": collective.chunks, "steps": high, "max_rounds": rounds, "least_rounds": False,
                       "proof": proof}
            return SynthesisResult(Status.UNSAT, (), None, "rounds", SYNTHESIZER, time.perf_counter() - start,
                                   account, steps_bound=low)
        high = min(high, rounds)  # S steps take at least S rounds
    if high < low:
        raise SynthesisError(f"max_steps {high} is below the {low} steps that {collective.name} needs on "
                             f"{topology.name}; raise --max-steps")
    attempts: list[Attempt] = []
    undecided = False
    check_encodable_size(topology, collective, max(low, 1))
    context = z3.Context()  # one for the run's solvers, as one process had before: the same answers as then
    for steps in range(max(low, 1), high + 1):
        left = None if deadline is None else deadline - time.perf_counter()
        if (left is not None and left <= 0) or not encoding_fits(topology, collective, steps):
            undecided = True  # out of time, or more steps would not fit in memory
            break
        limit = left if time_limit is None else time_limit if left is None else min(time_limit, left)
        result = synthesize_instance(topology, collective, steps, rounds, time_limit=limit, context=context)
        attempts += result.tried
        if result.found:
            status = Status.TIMEOUT if undecided else result.status
            return replace(result, status=status, synthesizer=SYNTHESIZER, seconds=time.perf_counter() - start,
                           tried=tuple(attempts), steps_bound=low)
        undecided |= result.status == Status.TIMEOUT
    account = {"chunks": collective.chunks, "steps": high, "max_rounds": rounds, "least_rounds": False}
    return SynthesisResult(Status.TIMEOUT if undecided else Status.UNSAT, (), None, "rounds", SYNTHESIZER,
                           time.perf_counter() - start, account, tried=tuple(attempts), steps_bound=low)


def impossible_in_rounds(topology: Topology, collective: Collective, rounds: int, low_steps: int) -> str | None:
    """Why no algorithm with at most `rounds` rounds exists in any number of steps (None when the bounds allow
    one): every step takes >= 1 round, so rounds >= the step lower bound; and rounds >= C x the R/C bound."""
    where = f"{collective.name} with {collective.chunks} chunk{'s' if collective.chunks != 1 else ''} on " \
            f"{topology.name}"
    if rounds < low_steps:
        return (f"no algorithm exists: {where} needs at least {low_steps} steps and every step takes at least one "
                f"round, so at most {rounds} rounds cannot do it in any number of steps; raise --rounds to >= "
                f"{low_steps}")
    need = rounds_lower_bound(topology, collective)
    if rounds < need:
        return (f"no algorithm exists: {where} needs at least {need} rounds (the bandwidth lower bound), so "
                f"at most {rounds} rounds cannot do it in any number of steps; raise --rounds to >= {need}")
    return None
