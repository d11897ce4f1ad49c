"""What a Pareto sweep returns (`pareto_frontier`, `pareto_allreduce`): its `SynthesisResult`, the
`--json` document, and the Ctrl-C exception that carries the points found so far."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.schedule import Attempt, FrontierPoint, SynthesisResult, pareto_optimal
from collsynth.synth.sweep import INTERRUPTED, TIME_LIMIT
from collsynth.topologies import Topology

SYNTHESIZER = "sccl-pareto"


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C during a sweep; `result` holds every point finished before it."""

    def __init__(self, result: SynthesisResult) -> None:
        super().__init__("sweep interrupted")
        self.result = result


def frontier_result(topology: Topology, base: Collective, bounds: tuple[int, Fraction],
                    points: tuple[FrontierPoint, ...], tried: tuple[Attempt, ...], stopped: str,
                    seconds: float) -> SynthesisResult:
    """The SynthesisResult of a sweep: the frontier's algorithms (by steps), every point, every solver call.
    Status: INTERRUPTED (Ctrl-C), TIMEOUT (the sweep's time limit ended it), SAT (points found), else
    TIMEOUT or UNSAT as the solver calls ended."""
    steps_lb, ratio_lb = bounds
    frontier = pareto_optimal(points)
    if stopped == INTERRUPTED:
        status = Status.INTERRUPTED
    elif stopped == TIME_LIMIT:
        status = Status.TIMEOUT
    elif points:
        status = Status.SAT
    else:
        status = Status.TIMEOUT if any(a.result == Status.TIMEOUT for a in tried) else Status.UNSAT
    algorithms = tuple(p.algorithm for p in frontier if p.algorithm is not None)
    return SynthesisResult(status, algorithms, ratio_lb, "rounds/chunk", SYNTHESIZER, seconds, {}, tried=tried,
                           points=points, steps_bound=steps_lb, stopped=stopped, topology=topology, collective=base)


def sweep_document(result: SynthesisResult) -> dict[str, Any]:
    """The `collsynth synth pareto --json` document of a sweep's result."""
    assert result.topology is not None and result.collective is not None
    return {
        "topology": result.topology.name,
        "collective": result.collective.name,
        "lower_bounds": {"steps": result.steps_bound, "rounds_per_chunk": str(result.bound)},
        "frontier": [p.to_dict() for p in result.frontier],
        "tried": [a.to_dict() for a in result.tried],
        "stopped": result.stopped,
        "seconds": round(result.seconds, 3),
    }
