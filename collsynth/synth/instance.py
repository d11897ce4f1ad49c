"""Synthesize one instance: a collective with C chunks in S steps and at most R rounds (or the fewest)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from math import ceil
from typing import Any

import z3

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.core.errors import CollsynthError
from collsynth.encodings.bounds import lower_bound_steps
from collsynth.encodings.sccl_z3 import InstanceOutcome
from collsynth.schedule import Algorithm, Attempt, SynthesisResult, concatenate
from collsynth.synth.portfolio import InstanceSolver
from collsynth.synth.problem import (
    COMPOSED,
    algorithm_name,
    allreduce_parts,
    encodable,
    schedule_to_algorithm,
    solver_provenance,
    strategy,
)
from collsynth.synth.sccl_greedy import greedy_schedule
from collsynth.synth.size import check_encodable_size, rounds_per_chunk_bound
from collsynth.topologies import Topology

SYNTHESIZER = "sccl-instance"


@dataclass(frozen=True)
class SolverRun:
    """What every solver call of one synthesis run shares: the per-call time limit and the z3 context."""

    time_limit: float | None
    context: Any


class SynthesisError(CollsynthError):
    """A synthesis request that cannot be run as given (the message says what to change)."""


def least_rounds(solver: InstanceSolver, lower: int, upper: int | None, time_limit: float | None,
                 part: str | None = None, on_attempt: Callable[[Attempt], None] | None = None,
                 ) -> tuple[InstanceOutcome | None, bool, list[Attempt]]:
    """The fewest rounds in [lower, upper] (upper None: any) for the solver's instance.

    Returns (best sat outcome or None, whether it is proven least, the attempts). Asks "<= upper" first;
    then narrows [lower, found - 1]: one round at a time when the gap is small (the usual case: the first
    answer is nearly tight), by bisection otherwise. A time-out stops the narrowing (not proven least)."""
    attempts: list[Attempt] = []

    def ask(limit: int) -> InstanceOutcome:
        outcome = solver.solve(limit, time_limit)
        attempt = Attempt(solver.collective.chunks, solver.steps, outcome.rounds, outcome.status, outcome.seconds, part)
        attempts.append(attempt)
        if on_attempt is not None:
            on_attempt(attempt)
        return outcome

    first = ask(solver.max_useful_rounds if upper is None else upper)
    if first.status != Status.SAT:
        return None, False, attempts
    best = first
    low = max(lower, solver.steps)  # every R in [low, ...] not yet refuted
    while best.rounds - 1 >= low:
        high = best.rounds - 1
        probe = high if high - low < 3 else (low + high) // 2
        outcome = ask(probe)
        if outcome.status == Status.SAT:
            best = outcome
        elif outcome.status == Status.UNSAT:
            low = probe + 1
        else:
            return best, False, attempts
    return best, True, attempts


def rounds_lower_bound(topology: Topology, collective: Collective) -> int:
    """Fewer rounds than this never carry the collective's C chunks (the bandwidth bound times C)."""
    return ceil(rounds_per_chunk_bound(topology, collective) * collective.chunks)


def instance_result(collective: Collective, steps: int, rounds: int | None, algorithm: Algorithm | None,
                    least: bool, status: Status, attempts: list[Attempt], start: float, *,
                    synthesizer: str = SYNTHESIZER, bound: int | None = None) -> SynthesisResult:
    """The SynthesisResult of an instance question: OPTIMAL when the algorithm's rounds are proven least for its
    C and S, SAT when found otherwise; the bound is the proven lower bound on the rounds."""
    if algorithm is not None and status in (Status.SAT, Status.OPTIMAL):
        status = Status.OPTIMAL if least else Status.SAT
    if algorithm is not None and least:
        bound = algorithm.rounds
    account: dict[str, Any] = {"chunks": collective.chunks, "steps": steps, "max_rounds": rounds,
                               "least_rounds": least, **solver_provenance()}
    return SynthesisResult(status, (algorithm,) if algorithm is not None else (), bound, "rounds", synthesizer,
                           time.perf_counter() - start, account, tried=tuple(attempts))


def synthesize_instance(topology: Topology, collective: Collective, steps: int, rounds: int | None = None, *,
                        time_limit: float | None = None, context: z3.Context | None = None) -> SynthesisResult:
    """An algorithm for `collective` (its chunk factor is C) on `topology` in exactly `steps` steps and at most
    `rounds` rounds; without `rounds`, the fewest rounds for those C and S (status OPTIMAL once proven). Every
    solver call gets `time_limit` seconds; a time-out is reported as status TIMEOUT, never as unsat."""
    start = time.perf_counter()
    if steps < 1:
        raise SynthesisError(f"steps must be >= 1, got {steps}")
    if rounds is not None and rounds < 1:
        raise SynthesisError(f"rounds must be >= 1, got {rounds}")
    steps_bound = lower_bound_steps(topology, collective)  # raises when the collective is impossible
    check_encodable_size(topology, collective, steps)
    # one z3 context for the run's solvers (or the caller's run), as one process had before: the same answers
    run = SolverRun(time_limit, context if context is not None else z3.Context())
    if strategy(collective) == COMPOSED:
        result = _allreduce_instance(topology, collective, steps, rounds, run, start)
    else:
        result = _direct_instance(topology, collective, steps, rounds, run, start)
    return replace(result, steps_bound=steps_bound)


def _direct_instance(topology: Topology, collective: Collective, steps: int, rounds: int | None,
                     run: SolverRun, start: float) -> SynthesisResult:
    time_limit = run.time_limit
    enc_topology, enc_collective = encodable(topology, collective)
    # a quick schedule bounds the question (and answers it if the solver times out)
    greedy = greedy_schedule(enc_topology, enc_collective, steps)
    greedy_rounds = sum(r for r, _ in greedy) if greedy is not None else None
    upper = rounds if rounds is not None else greedy_rounds
    if greedy_rounds is not None and upper is not None and greedy_rounds <= upper:
        upper = greedy_rounds
    else:
        greedy = None
    solver = InstanceSolver(enc_topology, enc_collective, steps, max_rounds=upper, context=run.context)
    lower = rounds_lower_bound(topology, collective)
    if rounds is None:
        best, least, attempts = least_rounds(solver, lower, upper, time_limit)
    else:
        best, _, attempts = least_rounds(solver, rounds, upper, time_limit)
        least = False  # only asked for "at most `rounds`"
    if best is None and greedy is not None and greedy_rounds is not None and attempts[-1].result == Status.TIMEOUT:
        best, least = InstanceOutcome(Status.SAT, collective.chunks, steps, greedy_rounds, greedy, 0.0), False
    if best is None or best.schedule is None:
        return instance_result(collective, steps, rounds, None, False, attempts[-1].result, attempts, start,
                               bound=max(lower, steps))
    algorithm = schedule_to_algorithm(
        algorithm_name(collective, topology, collective.chunks, steps, best.rounds), topology, collective,
        best.schedule, {**solver_provenance(), "seconds": round(sum(a.seconds for a in attempts), 3)})
    return instance_result(collective, steps, rounds, algorithm, least, Status.SAT, attempts, start,
                           bound=max(lower, steps))


def _allreduce_instance(topology: Topology, collective: Collective, steps: int, rounds: int | None,
                        run: SolverRun, start: float) -> SynthesisResult:
    """AllReduce: first ReduceScatter in S1 steps then AllGather in S - S1 (every split; cheap, and a good upper
    bound), then the direct encoding for anything better: within `rounds`, or fewer rounds than the
    composition needs (its unsat answer then proves the composition's rounds least)."""
    attempts: list[Attempt] = []
    composed = _allreduce_composition(topology, collective, steps, rounds, run, attempts)
    time_limit = run.time_limit
    if composed is not None and rounds is not None:
        return instance_result(collective, steps, rounds, composed, False, Status.SAT, attempts, start)
    solver = InstanceSolver(topology, collective, steps, context=run.context)
    lower = rounds_lower_bound(topology, collective)
    upper = rounds if composed is None else composed.rounds - 1
    tried: list[Attempt] = []
    if upper is not None and upper < max(lower, steps):
        found, least = None, True
    else:
        ask_from = lower if upper is None or rounds is None else upper
        found, least, tried = least_rounds(solver, ask_from, upper, time_limit, "direct")
    attempts += tried
    if found is not None and found.schedule is not None:
        name = algorithm_name(collective, topology, collective.chunks, steps, found.rounds)
        algorithm = schedule_to_algorithm(name, topology, collective, found.schedule,
                                          {**solver_provenance(), "encoding": "allreduce-direct"})
        return instance_result(collective, steps, rounds, algorithm, least and rounds is None, Status.SAT, attempts,
                               start)
    if composed is not None:
        proven = bool(tried) and tried[-1].result == Status.UNSAT or not tried
        return instance_result(collective, steps, rounds, composed, proven, Status.SAT, attempts, start)
    status = Status.UNSAT if tried and tried[-1].result == Status.UNSAT else Status.TIMEOUT
    return instance_result(collective, steps, rounds, None, False, status, attempts, start)


def _allreduce_composition(topology: Topology, collective: Collective, steps: int, rounds: int | None,
                           run: SolverRun, attempts: list[Attempt]) -> Algorithm | None:
    """The best ReduceScatter + AllGather algorithm in `steps` steps (within `rounds`), over every split."""
    rs, ag = allreduce_parts(collective)
    rs_low, ag_low = lower_bound_steps(topology, rs), lower_bound_steps(topology, ag)
    best: Algorithm | None = None
    for rs_steps in range(rs_low, steps - ag_low + 1):
        halves = []
        for part, coll, part_steps in (("reducescatter", rs, rs_steps), ("allgather", ag, steps - rs_steps)):
            budget = None if rounds is None else rounds - (steps - part_steps)  # the other half needs >= 1 a step
            enc_topology, enc_collective = encodable(topology, coll)
            solver = InstanceSolver(enc_topology, enc_collective, part_steps, context=run.context)
            found, _, tried = least_rounds(solver, rounds_lower_bound(topology, coll), budget, run.time_limit, part)
            attempts += tried
            if found is None or found.schedule is None:
                break
            name = algorithm_name(coll, topology, coll.chunks, part_steps, found.rounds)
            halves.append(schedule_to_algorithm(name, topology, coll, found.schedule, solver_provenance()))
        if len(halves) < 2:
            continue
        total = halves[0].rounds + halves[1].rounds
        if (rounds is None or total <= rounds) and (best is None or total < best.rounds):
            name = algorithm_name(collective, topology, collective.chunks, steps, total)
            best = concatenate(name, halves[0], halves[1], collective,
                               {**solver_provenance(), "composition": "reducescatter+allgather"})
    return best
