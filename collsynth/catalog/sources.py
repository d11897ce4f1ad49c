"""Where catalog entries come from: the synthesizers (SMT frontier / instance / least-steps, MILP, and the
cluster-scale greedy / trees / hierarchical) and the
hand-written library. Each returns what the rest of the pipeline compiles: `Algorithm`s (to lower) or
DSL `Program`s (hand-written, built per compile variant)."""

from __future__ import annotations

import importlib.metadata
import platform
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collsynth.catalog.errors import CatalogError
from collsynth.catalog.plan import LIBRARY, CompileVariant, WorkItem
from collsynth.collectives import Collective
from collsynth.core.enums import Status
from collsynth.core.errors import CollsynthError
from collsynth.schedule import Algorithm, StageReport, SynthesisResult
from collsynth.topologies import Topology


@dataclass(frozen=True)
class Synthesized:
    """What a synthesizer run gave: its algorithms and a JSON-able account of the run (solver, versions,
    every instance tried with its result and time)."""

    algorithms: tuple[Algorithm, ...]
    provenance: dict[str, Any] = field(default_factory=dict)


def tool_versions() -> dict[str, str]:
    """Versions of everything that can change a result: collsynth, the solvers, Python."""
    versions = {"python": platform.python_version()}
    for package in ("collsynth", "z3-solver", "pulp", "highspy"):
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


# --- hand-written programs ----------------------------------------------------------------------------

def library_names(topology: Topology, collective: Collective) -> list[str]:
    """Library programs for this collective that build on this topology (shape, links, node layout)."""
    from collsynth.algorithms import LIBRARY as PROGRAMS

    names = []
    for name, entry in PROGRAMS.items():
        if entry.collective != collective.name or entry.fits(topology.num_ranks, topology.num_machines) is not None:
            continue
        if entry.multi_node and topology.machines is None:
            continue
        try:
            build_library_program(name, topology, CompileVariant())
        except CollsynthError:
            continue  # e.g. no ring through the topology's links
        names.append(name)
    return names


def build_library_program(name: str, topology: Topology, variant: CompileVariant) -> Any:
    """The hand-written program `name`, with parameters suggested for the topology, in this variant."""
    from collsynth.algorithms import library_entry, suggested_parameters

    entry = library_entry(name)
    params = dict(suggested_parameters(entry, topology))
    if variant.inplace:
        if not entry.inplace:
            raise CatalogError(f"{name} has no in-place form; drop inplace = true for it")
        params["inplace"] = True
    return entry.builder(topology, instances=variant.instances, protocol=variant.protocol, **params)


# --- synthesizers -------------------------------------------------------------------------------------

def synthesize(item: WorkItem) -> Synthesized:
    """Run the item's synthesizer here; raises CollsynthError when it cannot give any algorithm. The answer depends
    on the item alone, whatever this process solved before: every SMT solve has a z3 context of its own."""
    runner = _SYNTHESIZERS.get(item.source)
    if runner is None:
        raise CatalogError(f"work item {item.label}: unknown source {item.source!r}")
    return runner(item)


def _smt_pareto(item: WorkItem) -> Synthesized:
    from collsynth.synth.pareto import pareto_frontier, sweep_document

    result = pareto_frontier(item.topology, item.collective, max_chunks=int(item.param("max_chunks")),
                             time_limit=float(item.param("time_limit_s")))
    points = result.frontier if item.param("points", "pareto") == "pareto" else result.points
    algorithms = tuple(point.algorithm for point in points if point.algorithm is not None)
    document = sweep_document(result)
    provenance = {"synthesizer": "smt-pareto", "solver": "z3", "versions": tool_versions(),
                  **{key: document[key] for key in ("lower_bounds", "frontier", "tried", "stopped")}}
    if not algorithms:
        raise CatalogError(f"the SMT frontier of {item.collective.name} on {item.topology.name} found no algorithm "
                           f"within {item.param('max_chunks')} chunks (time limit {item.param('time_limit_s')} s)")
    return Synthesized(algorithms, provenance)


def _smt_instance(item: WorkItem) -> Synthesized:
    from collsynth.synth.instance import synthesize_instance

    chunks, steps = int(item.param("chunks")), int(item.param("steps"))
    result = synthesize_instance(item.topology, item.collective.with_chunks(chunks), steps, item.param("rounds"),
                                 time_limit=float(item.param("time_limit_s")))
    algorithm = _algorithm_of(result, f"instance C={chunks} S={steps}")
    return Synthesized((algorithm,), {"synthesizer": "smt-instance", "solver": "z3", "versions": tool_versions(),
                                      **_outcome_account(result)})


def _smt_least_steps(item: WorkItem) -> Synthesized:
    from collsynth.synth.least_steps import least_steps

    chunks = int(item.param("chunks", 1))
    max_steps = item.param("max_steps")
    result = least_steps(item.topology, item.collective.with_chunks(chunks),
                         time_limit=float(item.param("time_limit_s")),
                         max_steps=None if max_steps is None else int(max_steps))
    algorithm = _algorithm_of(result, f"least-steps C={chunks}")
    return Synthesized((algorithm,), {"synthesizer": "smt-least-steps", "solver": "z3", "versions": tool_versions(),
                                      **_outcome_account(result)})


def _outcome_account(result: SynthesisResult) -> dict[str, Any]:
    """Status (a least-steps "timeout" with an algorithm: a smaller S stayed undecided; "sat" also when the rounds
    are proven least, which `least_rounds` says) and every solver call."""
    status = Status.SAT if result.status == Status.OPTIMAL else result.status
    return {"status": str(status), "least_rounds": bool(result.provenance.get("least_rounds")),
            "tried": [a.to_dict() for a in result.tried]}


def _algorithm_of(result: SynthesisResult, what: str) -> Algorithm:
    """The best algorithm of a synthesizer's result, or a CatalogError naming what to change."""
    if result.algorithm is None:
        raise CatalogError(f"SMT {what}: {result.status}, no algorithm; raise the time limit or change the instance")
    return result.algorithm


def _milp(item: WorkItem) -> Synthesized:
    from collsynth.encodings.sketch import load_sketch
    from collsynth.synth.milp import synthesize_milp

    sketch = load_sketch(str(item.param("sketch")))
    result = synthesize_milp(item.topology, item.collective.name, sketch, int(item.param("size")),
                             solver=str(item.param("solver", "highs")), time_limit=float(item.param("time_limit_s")),
                             root=item.collective.root)
    if result.algorithm is None:
        raise CatalogError(f"MILP with sketch {item.param('sketch')}: {result.status}, no algorithm; raise the time "
                           "limit or change the sketch")
    return Synthesized(result.algorithms, {**_result_account(result), "solver": result.provenance.get("solver"),
                                           "predicted_us": result.provenance.get("predicted_us")})


def _result_account(result: SynthesisResult) -> dict[str, Any]:
    """The common `SynthesisResult` fields: synthesizer, status, bound, seconds, stages."""
    return {"synthesizer": result.synthesizer, "versions": tool_versions(), "status": str(result.status),
            "lower_bound_us": float(result.bound) if result.bound is not None and result.bound_kind == "time_us"
            else None, "seconds": round(result.seconds, 3), "stages": [_stage_account(s) for s in result.stages]}


def _cluster(item: WorkItem) -> Synthesized:
    """The cluster-scale synthesizers (time-expanded greedy, tree packing, hierarchical composition)."""
    from collsynth.synth.cluster.greedy import greedy
    from collsynth.synth.cluster.hierarchical import hierarchical
    from collsynth.synth.cluster.trees import trees

    size = int(item.param("size", 1 << 30))
    if item.source == "greedy":
        result = greedy(item.topology, item.collective, size, seed=int(item.param("seed", 0)))
    elif item.source == "trees":
        result = trees(item.topology, item.collective, size, chunks_per_tree=int(item.param("chunks_per_tree", 4)))
    else:
        sources = [s.strip() for s in str(item.param("sources", "")).split(",") if s.strip()]
        result = hierarchical(item.topology, item.collective, size, sources=sources or None,
                              time_limit=float(item.param("time_limit_s")))
    if not result.algorithms:
        raise CatalogError(f"{item.source} found no algorithm of {item.collective.name} on {item.topology.name}")
    return Synthesized(result.algorithms, _result_account(result))


def _stage_account(stage: StageReport) -> dict[str, Any]:
    return {"name": stage.name, "seconds": round(stage.seconds, 3), "outcome": stage.outcome,
            "objective": stage.objective}


_SYNTHESIZERS: dict[str, Callable[[WorkItem], Synthesized]] = {
    "pareto": _smt_pareto,
    "instance": _smt_instance,
    "least-steps": _smt_least_steps,
    "milp": _milp,
    "greedy": _cluster,
    "trees": _cluster,
    "hierarchical": _cluster,
}

assert LIBRARY not in _SYNTHESIZERS  # library programs are built per variant, not synthesized
