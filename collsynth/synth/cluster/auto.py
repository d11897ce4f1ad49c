"""`auto(topology, collective, size)`: the cluster-scale synthesizer chosen by instance size.

Stages (data: name, what it runs, when it is skipped), run by one loop under one time budget:
- `greedy`: the time-expanded greedy with seed 0 (always; seconds at 1024 ranks);
- `rechunk`: chunk factors 2 and 4 (finer pipelining), while the state stays small (ranks x chunks <=
  RECHUNK_CELLS) and the budget lasts;
- `reseed`: more tie-break seeds while the budget lasts and the schedule is above the cut bound.
The best makespan wins (anytime: the best so far is kept when the budget runs out).
The exact synthesizers (SMT `synth least-steps`/`pareto`, `synth milp`) are not run here: they finish only
up to about 16 ranks and are called directly for those.
"""

from __future__ import annotations

import time
from dataclasses import replace

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.encodings.cut_bounds import cut_bound_us
from collsynth.schedule import StageReport, SynthesisResult
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import Topology

RESEEDS = 4  # extra tie-break seeds tried at most
RECHUNK_CELLS = 1 << 20  # ranks x chunks up to which finer chunk factors are tried
AT_BOUND = 1.001  # a makespan within this factor of the cut bound stops the search


def auto(topology: Topology, collective: Collective, size_bytes: int = 1 << 30, *, time_limit: float = 60.0,
         seed: int = 0) -> SynthesisResult:
    """The best schedule found within `time_limit` seconds (see the module docstring)."""
    began = time.perf_counter()
    bound = cut_bound_us(topology, collective, size_bytes).time_us
    best = greedy(topology, collective, size_bytes, seed=seed)
    stages = [StageReport("greedy", best.seconds, f"seed {seed}", _makespan(best))]
    for factor in (2, 4):
        coll = collective.with_chunks(collective.chunks * factor)
        if collective.num_ranks * coll.num_chunks > RECHUNK_CELLS or _at_bound(best, bound):
            break
        if time.perf_counter() - began + best.seconds * factor * 2 > time_limit:
            stages.append(StageReport("rechunk", 0.0, "budget spent", _makespan(best)))
            break
        trial = greedy(topology, coll, size_bytes, seed=seed)
        improved = _makespan(trial) < _makespan(best)
        stages.append(StageReport("rechunk", trial.seconds, f"chunks x{factor}: "
                                  f"{'improved' if improved else 'no better'}", _makespan(trial)))
        if improved:
            best = trial
    for extra in range(1, RESEEDS + 1):
        spent = time.perf_counter() - began
        if _at_bound(best, bound):
            stages.append(StageReport("reseed", 0.0, "skipped: at the cut bound", _makespan(best)))
            break
        if spent + best.seconds > time_limit:
            stages.append(StageReport("reseed", 0.0, "budget spent", _makespan(best)))
            break
        trial = greedy(topology, best.algorithm.collective if best.algorithm else collective, size_bytes,
                       seed=seed + extra)
        improved = _makespan(trial) < _makespan(best)
        stages.append(StageReport("reseed", trial.seconds, f"seed {seed + extra}: "
                                  f"{'improved' if improved else 'no better'}", _makespan(trial)))
        if improved:
            best = trial
    status = Status.OPTIMAL if bound > 0 and _makespan(best) <= bound * (1 + 1e-9) else Status.SAT
    return replace(best, status=status, bound=bound, bound_kind="time_us", synthesizer="auto",
                   seconds=time.perf_counter() - began, stages=tuple(stages))


def _makespan(result: SynthesisResult) -> float:
    algorithm = result.algorithm
    return float(algorithm.provenance["makespan_us"]) if algorithm is not None else float("inf")


def _at_bound(result: SynthesisResult, bound: float) -> bool:
    return _makespan(result) <= AT_BOUND * bound
