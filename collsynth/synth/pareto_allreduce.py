"""The AllReduce frontier: the frontiers of ReduceScatter and AllGather are swept (once when the topology equals
its reverse: then they coincide) and composed: (C1, S1, R1) + (C2, S2, R2) is (C, S1 + S2, C*(R1/C1 + R2/C2))
with C = lcm(C1, C2) <= max_chunks, each half's chunks split to C. Then the direct AllReduce encoding is
swept with the composed points as the points to beat (it finds lower-latency points the composition
cannot reach, e.g. fewer steps than the two halves' step bounds added)."""

from __future__ import annotations

import time
from dataclasses import replace
from fractions import Fraction
from math import lcm

from collsynth.collectives import Collective
from collsynth.schedule import (
    FEASIBLE,
    OPTIMAL,
    Attempt,
    FrontierPoint,
    SynthesisResult,
    concatenate,
    pareto_optimal,
    reversed_into_reduction,
    scaled,
)
from collsynth.synth.pareto_result import SweepInterrupted, frontier_result
from collsynth.synth.problem import algorithm_name, allreduce_parts, solver_provenance
from collsynth.synth.size import encoding_fits
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


def allreduce_frontier(topology: Topology, base: Collective, bounds: tuple[int, Fraction], limits: SweepLimits,
                       notify: EventHandler, start: float) -> SynthesisResult:
    """Compose the ReduceScatter and AllGather frontiers, then sweep the direct AllReduce encoding for
    anything better than the composition (fewer steps, or fewer rounds per chunk at the same steps)."""
    steps_lb, ratio_lb = bounds
    sweeps: dict[str, Sweep] = {}
    kept: tuple[FrontierPoint, ...] = ()
    stopped = MAX_CHUNKS
    try:
        kept, stopped = _composed_points(topology, base, ratio_lb, limits, notify, sweeps)
        for point in kept:
            notify("point", point)
        if stopped != TIME_LIMIT and encoding_fits(topology, base, steps_lb):
            sweeps["direct"] = Sweep(topology, base, limits, notify, "direct", bounds=bounds, seed=kept)
            stopped = sweeps["direct"].run()
    except KeyboardInterrupt:
        found = kept + tuple(sweeps["direct"].points) if "direct" in sweeps else kept
        raise SweepInterrupted(frontier_result(topology, base, bounds, found, _all_tried(sweeps), INTERRUPTED,
                                               time.perf_counter() - start)) from None
    points = kept + (tuple(sweeps["direct"].points) if "direct" in sweeps else ())
    met = any(p.rounds_per_chunk <= ratio_lb for p in points)
    stop = BOUND_MET if met else MAX_CHUNKS if stopped == GAVE_UP else stopped
    return frontier_result(topology, base, bounds, points, _all_tried(sweeps), stop, time.perf_counter() - start)


def _composed_points(topology: Topology, base: Collective, ratio_lb: Fraction, limits: SweepLimits,
                     notify: EventHandler, sweeps: dict[str, Sweep]) -> tuple[tuple[FrontierPoint, ...], str]:
    """The Pareto-optimal compositions of the two halves' frontiers, and why the halves' sweeps stopped."""
    rs, ag = allreduce_parts(base)
    symmetric = same_links(topology, reversed_topology(topology))
    stopped = MAX_CHUNKS
    for part, coll in (("allgather", ag), ("reducescatter", rs)):
        if part == "reducescatter" and symmetric:
            continue  # the reversed topology is the topology: ReduceScatter's sweep is AllGather's
        sweeps[part] = Sweep(topology, coll, limits, notify, part)
        if sweeps[part].run() == TIME_LIMIT:
            stopped = TIME_LIMIT
    ag_points = pareto_optimal(sweeps["allgather"].points)
    rs_points = (tuple(_reversed_dual(p, topology, rs) for p in ag_points) if symmetric
                 else pareto_optimal(sweeps["reducescatter"].points))
    composed = [point for first in rs_points for second in ag_points
                if (point := _compose(first, second, base, limits.max_chunks, ratio_lb)) is not None]
    return pareto_optimal(composed), stopped


def _all_tried(sweeps: dict[str, Sweep]) -> tuple[Attempt, ...]:
    return tuple(a for sweep in sweeps.values() for a in sweep.tried)


def _reversed_dual(point: FrontierPoint, topology: Topology, rs_unit: Collective) -> FrontierPoint:
    """An AllGather point on a topology equal to its reverse, read as the ReduceScatter point it is dual to."""
    assert point.algorithm is not None
    collective = rs_unit.split(point.chunks)
    name = algorithm_name(collective, topology, point.chunks, point.steps, point.rounds)
    algorithm = reversed_into_reduction(point.algorithm, topology, collective, name)
    return replace(point, algorithm=algorithm)


def _compose(first: FrontierPoint, second: FrontierPoint, base: Collective, max_chunks: int,
             ratio_lb: Fraction) -> FrontierPoint | None:
    chunks = lcm(first.chunks, second.chunks)
    if chunks > max_chunks or first.algorithm is None or second.algorithm is None:
        return None
    rs_algo = scaled(first.algorithm, chunks // first.chunks)
    ag_algo = scaled(second.algorithm, chunks // second.chunks)
    collective = base.split(chunks)
    steps, rounds = rs_algo.num_steps + ag_algo.num_steps, rs_algo.rounds + ag_algo.rounds
    name = algorithm_name(collective, first.algorithm.topology, chunks, steps, rounds)
    provenance = {**solver_provenance(), "composition": "reducescatter+allgather",
                  "reducescatter": [first.chunks, first.steps, first.rounds],
                  "allgather": [second.chunks, second.steps, second.rounds]}
    algorithm = concatenate(name, rs_algo, ag_algo, collective, provenance)
    # fewer rounds were only ruled out for the composition, not for every AllReduce: optimal only at the bound
    status = OPTIMAL if Fraction(rounds, chunks) <= ratio_lb else FEASIBLE
    return FrontierPoint(chunks, steps, rounds, status, algorithm, first.seconds + second.seconds)
