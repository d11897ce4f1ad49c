"""The Pareto frontier of latency (steps S) against bandwidth (rounds per chunk R/C), SCCL-style.

Sweep: chunk counts C = 1, 2, ... For each C, steps S from the step lower bound upward, find the fewest
rounds R for (C, S) *among those that would beat every point found so far with at most S steps*
(R/C strictly below their best R/C): anything else is dominated, so the solver is only asked
"R <= ceil(best * C) - 1?". The S loop for a C ends when that cap falls below max(S, ceil(bound * C)).
Every R/C fraction is tried, reduced or not (6/3 is not skipped because 2/1 was tried: at 3 steps it may
be feasible where 2/1 at 1 step is not). The sweep stops after the first C whose point meets the
bandwidth lower bound (no point can beat it), at `max_chunks`, or when the whole sweep's time limit is spent.

A point (C, S, R) is Pareto-optimal when no other point has <= S and <= R/C with one strict (points
with the same S and R/C: the one with fewer chunks). Its status is "optimal" when fewer rounds were
proved impossible for (C, S) (or R meets the bound) and "feasible" when a time-out left that open.
The sweep is anytime: every point is reported (`on_event("point", ...)`) as soon as it is found.

AllReduce (`pareto_allreduce`): the frontiers of ReduceScatter and AllGather, composed, then the direct
AllReduce encoding for anything better.

Chunk counts can run in parallel processes (`jobs`): a C started before an earlier C finished uses the
caps known at its start (it may find extra, dominated points; the frontier is the same).
"""

from __future__ import annotations

import time

import z3

from collsynth.collectives import Collective
from collsynth.core.signals import release_frames
from collsynth.encodings.bounds import lower_bound_steps
from collsynth.schedule import SynthesisResult, pareto_optimal
from collsynth.synth.instance import SynthesisError
from collsynth.synth.pareto_allreduce import allreduce_frontier
from collsynth.synth.pareto_result import SYNTHESIZER, SweepInterrupted, frontier_result, sweep_document
from collsynth.synth.problem import COMPOSED, strategy, unit
from collsynth.synth.size import check_encodable_size, rounds_per_chunk_bound
from collsynth.synth.sweep import (
    BOUND_MET,
    GAVE_UP,
    INTERRUPTED,
    MAX_CHUNKS,
    TIME_LIMIT,
    EventHandler,
    Sweep,
    SweepLimits,
)
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import reversed_topology, same_links

__all__ = ["BOUND_MET", "GAVE_UP", "INTERRUPTED", "MAX_CHUNKS", "SYNTHESIZER", "TIME_LIMIT", "EventHandler",
           "SweepInterrupted", "frontier_result", "pareto_frontier", "pareto_optimal", "sweep_document"]


def pareto_frontier(topology: Topology, collective: Collective, *, max_chunks: int = 8,
                    time_limit: float | None = 60.0, jobs: int = 1, max_steps: int | None = None,
                    on_event: EventHandler | None = None, total_time_limit: float | None = None) -> SynthesisResult:
    """Sweep the (steps, rounds per chunk) frontier of `collective` on `topology` (see the module docstring).

    `time_limit` applies to every solver call (a time-out is recorded as such, never as unsat) and
    `total_time_limit` to the whole sweep (it then ends with the points found, stopped TIME_LIMIT); `jobs`
    chunk counts run in parallel processes; `max_steps` caps S while no point is known yet (default: the
    step lower bound + the number of ranks). Ctrl-C raises SweepInterrupted carrying the partial result.
    An instance whose encoding would not fit in memory is refused (`collsynth.synth.size`)."""
    if max_chunks < 1:
        raise SynthesisError(f"max chunks must be >= 1, got {max_chunks}")
    if jobs < 1:
        raise SynthesisError(f"jobs must be >= 1, got {jobs}")
    start = time.perf_counter()
    base = unit(collective)
    notify: EventHandler = on_event or (lambda kind, payload: None)
    steps_lb = lower_bound_steps(topology, base)
    check_encodable_size(topology, base, steps_lb)
    ratio_lb = rounds_per_chunk_bound(topology, base)
    composed = strategy(base) == COMPOSED
    sweeps = 1 if not composed else 2 if same_links(topology, reversed_topology(topology)) else 3
    notify("bounds", {"steps": steps_lb, "rounds_per_chunk": ratio_lb, "sweeps": sweeps})
    deadline = None if total_time_limit is None else start + total_time_limit
    # one z3 context for the run's solvers, as one process had before: the same answers as then
    limits = SweepLimits(max_chunks, time_limit, jobs, max_steps, deadline, z3.Context())
    if composed:
        return allreduce_frontier(topology, base, (steps_lb, ratio_lb), limits, notify, start)
    sweep = Sweep(topology, base, limits, notify, bounds=(steps_lb, ratio_lb))
    try:
        stopped = sweep.run()
    except KeyboardInterrupt as stop:
        release_frames(stop)  # the cut-short solver frames (z3 contexts) go now, not with whoever keeps this
        raise SweepInterrupted(frontier_result(topology, base, (steps_lb, ratio_lb), tuple(sweep.points),
                                               tuple(sweep.tried), INTERRUPTED, time.perf_counter() - start)) from None
    return frontier_result(topology, base, (steps_lb, ratio_lb), tuple(sweep.points), tuple(sweep.tried), stopped,
                           time.perf_counter() - start)

