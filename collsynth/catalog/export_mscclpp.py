"""`catalog export --mscclpp DIR` and `catalog best --mscclpp`: MSCCL-IR or an MSCCL++ plan per size, from the
catalog's verified MSCCL-IR entries (each lowered to plans) and the MSCCL++ library's plans.

The plans written are the ones predicted fastest among plans over the size grid, each with the message size
range it wins, as `DIR/<topology>/<plan name>.json` (`:` in a topology's name as `_`) -- one plan file per
algorithm, the form the MSCCL++ executor loads (`ExecutionPlan(path, rank)`), a directory per machine for the
plan-directory loading path of its NCCL interface (it picks a plan by collective, in-place-ness and message
size range). Every plan has passed the schema check and the plan interpreter before it is written
(collsynth.tune.backend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collsynth.catalog.db import Catalog
from collsynth.catalog.query import find_topology
from collsynth.collectives.spec import canonical_name
from collsynth.core.files import write_atomic
from collsynth.emit.mscclpp import plan_to_json
from collsynth.topologies.model import Topology
from collsynth.tune.backend import (
    BackendChoice,
    PlanCandidate,
    VariantPlan,
    choose_backends,
    library_plan_candidates,
    lowered_plans,
    mscclpp_plans,
    plan_times,
    variant_fits,
    variant_plan,
)

__all__ = ["SizeChoice", "VariantPlan", "catalog_backends", "choose_per_size", "export_mscclpp", "mscclpp_plans",
           "plan_ranges", "variant_fits", "variant_plan"]


@dataclass(frozen=True)
class SizeChoice:
    size_bytes: int
    name: str  # the variant
    runtime: str  # "mscclpp" (the plan) or "msccl" (the MSCCL-IR it was lowered from)
    time_us: float


def choose_per_size(topology: Topology, sizes: list[int], dtype: str = "float32") -> list[SizeChoice]:
    """Per size, the fastest of every library variant's plan and (where it has one) its MSCCL-IR, as the
    simulator predicts them (collsynth.sim for the IR, collsynth.sim.mscclpp for the plan: one cost model)."""
    from collsynth.sim import simulate

    items = mscclpp_plans(topology)
    times = plan_times([PlanCandidate(i.variant.name, i.plan, "library") for i in items], topology, sizes, dtype)
    ir_times = {i.variant.name: [r.time_us for r in simulate(i.ir, topology, sizes, dtype=dtype).rows]
                for i in items if i.ir is not None}
    return [SizeChoice(c.size_bytes, c.name, "msccl" if c.backend == "ir" else "mscclpp", c.time_us)
            for c in choose_backends(sizes, ir_times, times)]


@dataclass(frozen=True)
class CatalogBackends:
    """One (topology, collective, in-place) group: the choices per size and the plans that competed."""

    topology: Topology
    collective: str
    inplace: bool
    choices: list[BackendChoice]
    plans: list[PlanCandidate]
    plan_times: dict[str, list[float]]
    refused: list[str]  # why some entries could not become plans (one line each)


def catalog_backends(catalog: Catalog, topology_spec: str, collective: str, sizes: Sequence[int],
                     dtype: str = "float32") -> list[CatalogBackends]:
    """Per in-place-ness: the catalog's verified entries of (topology, collective) as MSCCL-IR and lowered to
    plans, plus the library's plans, chosen per size."""
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.sim import simulate

    fingerprint, topology = find_topology(catalog, topology_spec)
    coll = canonical_name(collective)
    entries = catalog.entries(fingerprint=fingerprint, collective=coll, status="ok")
    groups = []
    for inplace in sorted({e.variant.inplace for e in entries} | ({True} if coll == "allreduce" else set()),
                          reverse=True):
        ir_times: dict[str, list[float]] = {}
        plans = library_plan_candidates(topology, coll, inplace)
        refused: list[str] = []
        for entry in (e for e in entries if e.variant.inplace == inplace):
            ir = read_xml(catalog.xml_text(entry))
            label = f"{entry.name}@{entry.id[:8]}"
            ir_times[f"ir:{label}"] = [row.time_us for row in simulate(ir, topology, list(sizes), dtype=dtype).rows]
            tuned = _tuned_times(entry.provenance, sizes)
            if tuned:
                ir_times[f"ir:{label} tuned"] = tuned
            lowered, why = lowered_plans(ir, topology, label)
            plans += lowered
            refused += why
        times = plan_times(plans, topology, sizes, dtype)
        groups.append(CatalogBackends(topology, coll, inplace, choose_backends(sizes, ir_times, times), plans, times,
                                      refused))
    return groups


def _tuned_times(provenance: Mapping[str, Any], sizes: Sequence[int]) -> list[float] | None:
    """The entry's tuned configuration's time per size (collsynth.tune records in the catalog), where a record
    is for that size; inf elsewhere; None when it has no record at any of the sizes."""
    records = provenance.get("tuned")
    if not isinstance(records, list):
        return None
    by_size: dict[int, float] = {}
    for record in records:
        for key in ("requested_bytes", "size_bytes"):
            by_size.setdefault(int(record[key]), float(record["time_us"]))
    times = [by_size.get(size, math.inf) for size in sizes]
    return times if any(math.isfinite(t) for t in times) else None


def plan_ranges(plans: Sequence[Any], times: dict[str, list[float]], sizes: Sequence[int],
                ) -> list[tuple[Any, int, int]]:
    """The plans predicted fastest (among plans) somewhere on `sizes`, each with the message size range it
    wins, [min, max] in bytes: from its first winning size (0 for the smallest) to just below the next
    winner's first size (no upper limit for the largest). A plan winning two separate ranges appears twice."""
    if not plans or not sizes:
        return []
    winners = [min(range(len(plans)), key=lambda p: times[plans[p].name][k]) for k in range(len(sizes))]
    ranges: list[tuple[Any, int, int]] = []
    start = 0
    for k in range(1, len(sizes) + 1):
        if k == len(sizes) or winners[k] != winners[start]:
            low = 0 if start == 0 else sizes[start]
            high = 2**64 - 1 if k == len(sizes) else sizes[k] - 1
            ranges.append((plans[winners[start]], low, high))
            start = k
    return ranges


def export_mscclpp(topologies: list[Topology], directory: Path, sizes: list[int] | None = None,
                   catalog: Catalog | None = None, collectives: Sequence[str] = ()) -> list[Path]:
    """Per topology (and per collective and in-place-ness), write the plans that win some message size
    (predicted among plans over `sizes`, default 1KB..1GB by powers of 2), each with min/max_message_size set
    to its range, to DIR/<topology>/<name>.json. With a catalog, its verified MSCCL-IR entries lowered to
    plans compete with the library's plans; without one (or for a topology it lacks), the library's plans
    alone. Every plan passed the schema check and the plan interpreter. Returns the paths written."""
    from collsynth.sim.nccl import size_sweep

    sizes = sizes or size_sweep(1 << 10, 1 << 30)
    written = []
    for topology in topologies:
        for plans, times in _plan_groups(topology, sizes, catalog, collectives):
            seen: dict[str, int] = {}
            for item, low, high in plan_ranges(plans, times, sizes):
                base = str(item.plan["name"])
                seen[base] = seen.get(base, 0) + 1
                name = base if seen[base] == 1 else f"{base}_{seen[base]}"
                plan = dict(item.plan, name=name, min_message_size=low, max_message_size=high)
                folder = "".join(c if c.isalnum() or c in "._-" else "_" for c in topology.name)
                written.append(write_atomic(Path(directory) / folder / f"{name}.json", plan_to_json(plan)))
    return written


def _plan_groups(topology: Topology, sizes: Sequence[int], catalog: Catalog | None, collectives: Sequence[str],
                 ) -> list[tuple[list[PlanCandidate], dict[str, list[float]]]]:
    wanted = {canonical_name(c) for c in collectives}
    in_catalog = catalog is not None and any(fp == topology.fingerprint() for fp, _ in catalog.topologies())
    if catalog is None or not in_catalog:
        if wanted and "allreduce" not in wanted:
            return []
        library = library_plan_candidates(topology, "allreduce")
        return [(library, plan_times(library, topology, sizes))] if library else []
    present = sorted({e.collective for e in catalog.entries(fingerprint=topology.fingerprint(), status="ok")})
    groups = []
    for coll in (c for c in present if not wanted or c in wanted):
        for group in catalog_backends(catalog, topology.name, coll, sizes):
            if group.plans:
                groups.append((group.plans, group.plan_times))
    return groups
