"""The fewest steps: from the step lower bound upward, the first S with an algorithm."""

from __future__ import annotations

import time

from collsynth.collectives import Collective
from collsynth.encodings.bounds import lower_bound_steps
from collsynth.encodings.sccl_z3 import SAT, TIMEOUT
from collsynth.synth.instance import Attempt, InstanceResult, SynthesisError, synthesize_instance
from collsynth.topologies import Topology


def least_steps(topology: Topology, collective: Collective, *, rounds: int | None = None,
                time_limit: float | None = None, max_steps: int | None = None) -> InstanceResult:
    """The algorithm with the fewest steps (and, for those steps, the fewest rounds; with `rounds`: at most
    that many). Tries S = lower bound, lower bound + 1, ... up to `max_steps` (default: lower bound + number
    of ranks). Status "timeout" when a time-out left a smaller S undecided; the algorithm found (if any)
    then still comes back."""
    start = time.perf_counter()
    low = lower_bound_steps(topology, collective)
    high = max_steps if max_steps is not None else low + topology.num_ranks
    if high < low:
        raise SynthesisError(f"max_steps {high} is below the {low} steps that {collective.name} needs on "
                             f"{topology.name}; raise --max-steps")
    attempts: list[Attempt] = []
    undecided = False
    for steps in range(max(low, 1), high + 1):
        result = synthesize_instance(topology, collective, steps, rounds, time_limit=time_limit)
        attempts += result.attempts
        if result.status == SAT:
            status = TIMEOUT if undecided else SAT
            return InstanceResult(status, result.chunks, steps, result.rounds, result.algorithm, result.least,
                                  time.perf_counter() - start, tuple(attempts))
        undecided |= result.status == TIMEOUT
    return InstanceResult(TIMEOUT if undecided else "unsat", collective.chunks, high, rounds, None, False,
                          time.perf_counter() - start, tuple(attempts))
