"""Plan -> work items: `expand_plan(plan)` resolves every target's topology and collectives and returns one work
item per synthesizer setting and per fitting hand-written program (sources.library_names), each keyed by a hash
of what determines its result."""

from __future__ import annotations

from pathlib import Path

from collsynth.catalog.errors import PlanError
from collsynth.catalog.plan import LIBRARY, Plan, WorkItem
from collsynth.catalog.sources import library_names
from collsynth.collectives import resolve_collective
from collsynth.core.errors import CollsynthError
from collsynth.topologies import Topology, resolve_topology


def expand_plan(plan: Plan) -> list[WorkItem]:
    """Resolve every target's topology and collectives; one work item per synthesizer setting and per
    fitting hand-written program. Raises PlanError for unknown names (naming the target)."""
    items: list[WorkItem] = []
    seen: set[str] = set()
    for index, target in enumerate(plan.targets):
        where = f"{plan.path}: targets[{index}]" if plan.path else f"plan: targets[{index}]"
        topology = _resolve_topology(target.topology, plan.path, where)
        for coll_spec in target.collectives:
            try:
                collective = resolve_collective(_relative(coll_spec, plan.path), topology.num_ranks, root=target.root)
            except CollsynthError as exc:
                raise PlanError(f"{where}.collectives: {exc}") from None
            candidates: list[WorkItem] = []
            for synth_name in target.synthesizers:
                spec = plan.synthesizer(synth_name)
                candidates.append(WorkItem(topology=topology, topology_spec=target.topology, collective=collective,
                                           source=spec.kind, params=spec.params, variants=plan.variants,
                                           sizes=plan.sizes, dtype=plan.dtype, synth_name=spec.name))
            if target.library is not False:
                names = library_names(topology, collective)
                if target.library is not True:
                    wanted = {n.lower().replace("-", "_") for n in target.library}
                    _check_library_names(wanted, where)
                    names = [n for n in names if n in wanted]
                for name in names:
                    candidates.append(WorkItem(topology=topology, topology_spec=target.topology,
                                               collective=collective, source=LIBRARY, params=(("program", name),),
                                               variants=plan.variants, sizes=plan.sizes, dtype=plan.dtype))
            for item in candidates:
                if item.key not in seen:
                    seen.add(item.key)
                    items.append(item)
    return items


def _check_library_names(wanted: set[str], where: str) -> None:
    from collsynth.algorithms import LIBRARY as PROGRAMS

    unknown = sorted(wanted - set(PROGRAMS))
    if unknown:
        raise PlanError(f"{where}.library: unknown program {unknown[0]!r}; `collsynth algorithms list` shows them")


def _resolve_topology(spec: str, plan_path: Path | None, where: str) -> Topology:
    try:
        return resolve_topology(_relative(spec, plan_path))
    except CollsynthError as exc:
        raise PlanError(f"{where}.topology: {exc}") from None


def _relative(spec: str, plan_path: Path | None) -> str:
    """A file name relative to the plan's directory when such a file exists there."""
    if plan_path is not None and spec.endswith(".json") and not Path(spec).is_absolute():
        candidate = plan_path.parent / spec
        if candidate.is_file():
            return str(candidate)
    return spec
