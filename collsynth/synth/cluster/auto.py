"""`auto(topology, collective, size)`: the synthesizer chosen by instance size, under one time budget.

Stages (data: `plan_stages` names them, `STAGES` runs them), in order, each while the budget lasts:
- `hierarchical` (first on N identical nodes with a NIC per GPU, for AllReduce, AllGather, ReduceScatter,
  AllToAll): every composition of node and rail phase schedules (`hierarchical.py`);
- `greedy`: the time-expanded greedy with seed 0, then chunk factors 2 and 4 while the state stays small
  (ranks x chunks <= RECHUNK_CELLS), then more tie-break seeds (skipped on NxTOPO above GREEDY_NODES_MAX
  ranks, where the hierarchical composition is the scalable answer);
- `exact`: SCCL least-steps (SMT) up to EXACT_MAX_RANKS ranks, skipped with the size check's message where
  the encoding would not fit in memory;
- `trees`: tree packing (AllGather, ReduceScatter, Broadcast, AllReduce) up to TREES_MAX_RANKS ranks.
A stage that finds a schedule within AT_BOUND of the cut bound ends the run. Every schedule found is
reported through `on_found` when it beats the best so far (anytime: the caller prints and saves it), and
the result holds them all, best first by model time (a timed schedule's makespan, else the alpha-beta
time of its steps).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.core.errors import CollsynthError
from collsynth.encodings.cut_bounds import cut_bound_us
from collsynth.schedule import Algorithm, StageReport, SynthesisResult
from collsynth.synth.cluster import hierarchical as hier
from collsynth.synth.cluster import trees as packing
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import Topology

RESEEDS = 4  # extra tie-break seeds tried at most
RECHUNK_CELLS = 1 << 20  # ranks x chunks up to which finer chunk factors are tried
AT_BOUND = 1.001  # a makespan within this factor of the cut bound stops the search
EXACT_MAX_RANKS = 8  # the SMT least-steps search answers in seconds up to about this size
TREES_MAX_RANKS = 256  # the packing (networkx Edmonds per root) takes minutes above this
GREEDY_NODES_MAX = 64  # on NxTOPO, the greedy runs too (after hierarchical) up to this many ranks

Found = Callable[[str, Algorithm, float], None]


def model_us(algorithm: Algorithm, size_bytes: int) -> float:
    """A timed schedule's makespan, else the alpha-beta time of its steps."""
    makespan = algorithm.provenance.get("makespan_us")
    return float(makespan) if makespan is not None else hier.model_time_us(algorithm, size_bytes)


@dataclass
class _Run:
    """The run's state: what was found, the stage reports and the budget (mutable, local to one call)."""

    topology: Topology
    collective: Collective
    size: int
    deadline: float
    bound: float
    on_found: Found | None
    found: list[tuple[float, int, Algorithm]] = field(default_factory=list)
    stages: list[StageReport] = field(default_factory=list)

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def best(self) -> float:
        return self.found[0][0] if self.found else float("inf")

    def at_bound(self) -> bool:
        return self.bound > 0 and self.best() <= AT_BOUND * self.bound

    def offer(self, stage: str, algorithm: Algorithm, seconds: float, note: str) -> None:
        time_us = model_us(algorithm, self.size)
        improved = time_us < self.best()
        self.found.append((time_us, len(self.found), algorithm))
        self.found.sort(key=lambda x: x[:2])
        self.stages.append(StageReport(stage, seconds, f"{note}: {'improved' if improved else 'no better'}", time_us))
        if improved and self.on_found is not None:
            self.on_found(f"{stage} ({note})", algorithm, time_us)


def _greedy(run: _Run, seed: int) -> None:
    began = time.perf_counter()
    first = greedy(run.topology, run.collective, run.size, seed=seed)
    assert first.algorithm is not None
    run.offer("greedy", first.algorithm, time.perf_counter() - began, f"seed {seed}")
    best_coll = run.collective
    for factor in (2, 4):
        coll = run.collective.with_chunks(run.collective.chunks * factor)
        if run.collective.num_ranks * coll.num_chunks > RECHUNK_CELLS or run.at_bound():
            break
        if run.left() < first.seconds * factor * 2:
            run.stages.append(StageReport("rechunk", 0.0, "budget spent", run.best()))
            break
        before, began = run.best(), time.perf_counter()
        trial = greedy(run.topology, coll, run.size, seed=seed).algorithm
        assert trial is not None
        run.offer("rechunk", trial, time.perf_counter() - began, f"chunks x{factor}")
        best_coll = coll if run.best() < before else best_coll
    for extra in range(1, RESEEDS + 1):
        if run.at_bound():
            run.stages.append(StageReport("reseed", 0.0, "skipped: at the cut bound", run.best()))
            break
        if run.left() < first.seconds:
            run.stages.append(StageReport("reseed", 0.0, "budget spent", run.best()))
            break
        began = time.perf_counter()
        trial = greedy(run.topology, best_coll, run.size, seed=seed + extra).algorithm
        assert trial is not None
        run.offer("reseed", trial, time.perf_counter() - began, f"seed {seed + extra}")


def _exact(run: _Run, seed: int) -> None:
    from collsynth.synth.least_steps import least_steps

    began = time.perf_counter()
    try:
        result = least_steps(run.topology, run.collective, time_limit=max(1.0, run.left()),
                             deadline=run.deadline)
    except CollsynthError as exc:  # the size check: the encoding would not fit in memory
        run.stages.append(StageReport("exact", time.perf_counter() - began, f"skipped: {exc}"))
        return
    if result.algorithm is None:
        run.stages.append(StageReport("exact", time.perf_counter() - began, f"{result.status}, no schedule"))
        return
    run.offer("exact", result.algorithm, time.perf_counter() - began, f"least-steps {result.status}")


def _trees(run: _Run, seed: int) -> None:
    began = time.perf_counter()
    result = packing.trees(run.topology, run.collective, run.size)
    assert result.algorithm is not None
    run.offer("trees", result.algorithm, time.perf_counter() - began, str(result.status))


def _hierarchical(run: _Run, seed: int) -> None:
    began = time.perf_counter()
    result = hier.hierarchical(run.topology, run.collective, run.size, time_limit=min(20.0, max(1.0, run.left())),
                               deadline=run.deadline)
    spent = time.perf_counter() - began
    for algorithm in result.algorithms:
        run.offer("hierarchical", algorithm, spent / len(result.algorithms), str(algorithm.provenance["plan"]) +
                  f" node={algorithm.provenance['node_source']} rail={algorithm.provenance['rail_source']}")


STAGES: dict[str, Callable[[_Run, int], None]] = {"hierarchical": _hierarchical, "greedy": _greedy,
                                                  "exact": _exact, "trees": _trees}


def plan_stages(topology: Topology, collective: Collective) -> tuple[str, ...]:
    """The stages `auto` runs on this instance, in order (see the module docstring)."""
    n = topology.num_ranks
    try:
        hier.groups_of(topology)
        composable = collective.name in hier.SUPPORTED
    except CollsynthError:
        composable = False
    if composable:
        return ("hierarchical", "greedy") if n <= GREEDY_NODES_MAX else ("hierarchical",)
    stages = ["greedy"]
    if n <= EXACT_MAX_RANKS:
        stages.append("exact")
    if collective.name in packing.SUPPORTED and n <= TREES_MAX_RANKS:
        stages.append("trees")
    return tuple(stages)


def auto(topology: Topology, collective: Collective, size_bytes: int = 1 << 30, *, time_limit: float = 60.0,
         seed: int = 0, on_found: Found | None = None) -> SynthesisResult:
    """Every schedule found within `time_limit` seconds, best first (see the module docstring)."""
    began = time.perf_counter()
    bound = cut_bound_us(topology, collective, size_bytes).time_us
    run = _Run(topology, collective, size_bytes, began + time_limit, bound, on_found)
    for name in plan_stages(topology, collective):
        if run.found and (run.at_bound() or run.left() <= 0):
            why = "at the cut bound" if run.at_bound() else "budget spent"
            run.stages.append(StageReport(name, 0.0, f"skipped: {why}", run.best()))
            continue
        STAGES[name](run, seed)
    algorithms = tuple(replace(a, provenance={**a.provenance, "model_time_us": t}) for t, _, a in run.found)
    status = Status.OPTIMAL if bound > 0 and run.best() <= bound * (1 + 1e-9) else Status.SAT
    return SynthesisResult(status, algorithms, bound, "time_us", "auto", time.perf_counter() - began,
                           {"stages_planned": list(plan_stages(topology, collective)), "size_bytes": size_bytes},
                           tuple(run.stages), topology=topology, collective=collective)
