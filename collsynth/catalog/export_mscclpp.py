"""`catalog export --mscclpp DIR`: the MSCCL++ library's execution plans for a topology, each checked by the
plan interpreter, written as `DIR/<topology>/<plan name>.json` -- one plan file per algorithm, the form the
MSCCL++ executor loads (`ExecutionPlan(path, rank)`), a directory of them per machine for the plan-directory
loading path of its NCCL interface (it picks a plan by collective, in-place-ness and message size range).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from collsynth.algorithms.mscclpp import (
    MSCCLPP_VARIANTS,
    MscclppVariant,
    supports_switch_channels,
    switch_allreduce_plan,
)
from collsynth.algorithms.registry import build
from collsynth.compiler import compile_program
from collsynth.core.errors import CollsynthError
from collsynth.core.files import write_atomic
from collsynth.emit.mscclpp import ir_to_plan, plan_to_json
from collsynth.ir import Algo
from collsynth.runtime.plan import checked_plan
from collsynth.topologies.model import Topology


@dataclass(frozen=True)
class VariantPlan:
    variant: MscclppVariant
    plan: dict[str, Any]
    ir: Algo | None  # the MSCCL-IR the plan was lowered from (None for a direct plan)


def variant_fits(variant: MscclppVariant, topology: Topology) -> str | None:
    """None when the variant can be built for the topology, else why not."""
    if variant.multi_node and topology.num_nodes < 2:
        return "needs several nodes"
    if not variant.multi_node and topology.num_nodes > 1 and variant.channels != "port":
        return "a one-node algorithm (its memory channels or switch need one node)"
    if variant.channels == "switch" and not supports_switch_channels(topology.name):
        return "needs NVLink SHARP switch channels (h100_nvswitch)"
    return None


def variant_plan(variant: MscclppVariant, topology: Topology) -> VariantPlan:
    """The variant's plan for the topology, schema-checked and passed by the plan interpreter."""
    why = variant_fits(variant, topology)
    if why is not None:
        raise CollsynthError(f"{variant.name} does not fit {topology.name}: {why}")
    if variant.library_program is None:
        plan, ir = switch_allreduce_plan(topology.num_ranks, variant.name), None
    else:
        ir = compile_program(build(variant.library_program, topology, protocol=variant.protocol, inplace=True))
        plan = ir_to_plan(ir, topology, variant.channels, name=variant.name, groups=variant.groups)
    checked_plan(plan)
    return VariantPlan(variant, plan, ir)


def mscclpp_plans(topology: Topology) -> list[VariantPlan]:
    return [variant_plan(v, topology) for v in MSCCLPP_VARIANTS if variant_fits(v, topology) is None]


@dataclass(frozen=True)
class SizeChoice:
    size_bytes: int
    name: str  # the variant
    runtime: str  # "mscclpp" (the plan) or "msccl" (the MSCCL-IR it was lowered from)
    time_us: float


def choose_per_size(topology: Topology, sizes: list[int], dtype: str = "float32") -> list[SizeChoice]:
    """Per size, the fastest of every fitting variant's plan and (where it has one) its MSCCL-IR, as the
    simulator predicts them (collsynth.sim for the IR, collsynth.sim.mscclpp for the plan: one cost model)."""
    from collsynth.sim import simulate
    from collsynth.sim.mscclpp import simulate_plan

    candidates: list[tuple[str, str, list[float]]] = []
    for item in mscclpp_plans(topology):
        rows = simulate_plan(item.plan, topology, sizes, dtype=dtype).rows
        candidates.append((item.variant.name, "mscclpp", [row.time_us for row in rows]))
        if item.ir is not None:
            rows = simulate(item.ir, topology, sizes, dtype=dtype).rows
            candidates.append((item.variant.name, "msccl", [row.time_us for row in rows]))
    choices = []
    for k, size in enumerate(sizes):
        name, runtime, times = min(candidates, key=lambda c: c[2][k])
        choices.append(SizeChoice(size, name, runtime, times[k]))
    return choices


def plan_ranges(topology: Topology, sizes: list[int]) -> list[tuple[VariantPlan, int, int]]:
    """The plans that the simulator predicts fastest (among plans) somewhere on `sizes`, each with the message
    size range it wins, [min, max] in bytes: from its first winning size (0 for the smallest) to just below
    the next winner's first size (no upper limit for the largest). A plan winning two separate ranges appears
    twice."""
    from collsynth.sim.mscclpp import simulate_plan

    plans = mscclpp_plans(topology)
    if not plans or not sizes:
        return []
    times = [[row.time_us for row in simulate_plan(item.plan, topology, sizes).rows] for item in plans]
    winners = [min(range(len(plans)), key=lambda p: times[p][k]) for k in range(len(sizes))]
    ranges: list[tuple[VariantPlan, int, int]] = []
    start = 0
    for k in range(1, len(sizes) + 1):
        if k == len(sizes) or winners[k] != winners[start]:
            low = 0 if start == 0 else sizes[start]
            high = 2**64 - 1 if k == len(sizes) else sizes[k] - 1
            ranges.append((plans[winners[start]], low, high))
            start = k
    return ranges


def export_mscclpp(topologies: list[Topology], directory: Path, sizes: list[int] | None = None) -> list[Path]:
    """Per topology, write the plans that win some message size (predicted among plans over `sizes`, default
    1KB..1GB by powers of 2), each with min/max_message_size set to its range, to DIR/<topology>/<name>.json;
    the executor's NCCL interface picks a plan by collective and size range from such a directory. Every
    plan passed the plan interpreter (variant_plan). Returns the paths written."""
    from collsynth.sim.nccl import size_sweep

    sizes = sizes or size_sweep(1 << 10, 1 << 30)
    written = []
    for topology in topologies:
        seen: dict[str, int] = {}
        for item, low, high in plan_ranges(topology, sizes):
            base = str(item.plan["name"])
            seen[base] = seen.get(base, 0) + 1
            name = base if seen[base] == 1 else f"{base}_{seen[base]}"
            plan = dict(item.plan, name=name, min_message_size=low, max_message_size=high)
            path = Path(directory) / topology.name / f"{name}.json"
            written.append(write_atomic(path, plan_to_json(plan)))
    return written
