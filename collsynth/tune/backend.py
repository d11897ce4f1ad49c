"""MSCCL-IR or an MSCCL++ execution plan, per size: the runtime choice of the tuner and the catalog.

For one (topology, collective) and a list of sizes, the candidates are
* the MSCCL-IR algorithms (the tuner's best configuration per size, or the catalog's verified entries),
  timed by collsynth.sim;
* each of those IRs lowered to a plan (collsynth.emit.mscclpp; Simple and LL; one plan threadblock per IR
  threadblock and one per rank; on NVLink SHARP topologies also switch-channel ops where the IR's steps are
  a group reduce + broadcast per chunk, collsynth.emit.mscclpp_switch), kept only when it passes the schema
  check and the plan interpreter;
* the MSCCL++ library's plans (collsynth.algorithms.mscclpp: 1PA, 2PA memory/port/switch, 2PH) that fit;
plans timed by collsynth.sim.mscclpp (the same link tables). Per size the fastest wins; ties go to the IR
(the runtime already deployed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from collsynth.algorithms.mscclpp import (
    MSCCLPP_VARIANTS,
    MscclppVariant,
    supports_switch_channels,
    switch_allreduce_plan,
)
from collsynth.algorithms.registry import build
from collsynth.collectives.spec import canonical_name
from collsynth.compiler import compile_program
from collsynth.core.errors import CollsynthError
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.ir import Algo
from collsynth.runtime.plan import checked_plan
from collsynth.topologies.model import Topology

BACKENDS = ("ir", "mscclpp")
PLAN_PROTOCOLS = ("Simple", "LL")  # what a plan can say (LL128 has no plan form)
PLAN_GROUPS = (None, 1)  # plan threadblocks per rank: one per IR threadblock (where semaphores allow); one


@dataclass(frozen=True)
class VariantPlan:
    variant: MscclppVariant
    plan: dict[str, Any]
    ir: Algo | None  # the MSCCL-IR the plan was lowered from (None for a direct plan)


def variant_fits(variant: MscclppVariant, topology: Topology) -> str | None:
    """None when the variant can be built for the topology, else why not."""
    if variant.multi_node and topology.num_machines < 2:
        return "needs several nodes"
    if not variant.multi_node and topology.num_machines > 1 and variant.channels != "port":
        return "a one-node algorithm (its memory channels or switch need one node)"
    if variant.channels == "switch" and not supports_switch_channels(topology.name):
        return "needs NVLink SHARP switch channels (h100_nvswitch)"
    return None


def variant_plan(variant: MscclppVariant, topology: Topology, inplace: bool = True) -> VariantPlan:
    """The variant's plan for the topology, schema-checked and passed by the plan interpreter."""
    why = variant_fits(variant, topology)
    if why is not None:
        raise CollsynthError(f"{variant.name} does not fit {topology.name}: {why}")
    if variant.library_program is None:
        plan, ir = switch_allreduce_plan(topology.num_ranks, variant.name, inplace=inplace), None
    else:
        ir = compile_program(build(variant.library_program, topology, protocol=variant.protocol, inplace=inplace))
        plan = ir_to_plan(ir, topology, variant.channels, name=variant.name, groups=variant.groups)
    checked_plan(plan)
    return VariantPlan(variant, plan, ir)


def mscclpp_plans(topology: Topology, collective: str = "allreduce", inplace: bool = True) -> list[VariantPlan]:
    """The library's MSCCL++ plans (all AllReduce) that fit the topology."""
    if canonical_name(collective) != "allreduce":
        return []
    return [variant_plan(v, topology, inplace) for v in MSCCLPP_VARIANTS if variant_fits(v, topology) is None]


@dataclass(frozen=True)
class PlanCandidate:
    name: str
    plan: dict[str, Any]
    origin: str  # the IR candidate it was lowered from, or "library"


def lowered_plans(ir: Algo, topology: Topology, name: str) -> tuple[list[PlanCandidate], list[str]]:
    """`ir` lowered to plans (each protocol a plan can say x each threadblock grouping), every one through the
    schema check and the plan interpreter; and a one-line reason per lowering that failed."""
    plans: list[PlanCandidate] = []
    reasons: list[str] = []
    seen: set[str] = set()
    for protocol in PLAN_PROTOCOLS:
        for groups in PLAN_GROUPS:
            label = f"{name}/{protocol}" + ("" if groups is None else f"/{groups}tb")
            try:
                plan = ir_to_plan(replace(ir, proto=protocol), topology, "auto", name=_plan_name(label),
                                  groups=groups)
                checked_plan(plan)
            except CollsynthError as exc:
                reasons.append(f"{label}: {exc}")
                continue
            body = repr({k: v for k, v in plan.items() if k != "name"})
            if body not in seen:
                seen.add(body)
                plans.append(PlanCandidate(f"plan:{label}", plan, name))
    switch = _switch_plan(ir, topology, name)
    if isinstance(switch, PlanCandidate):
        plans.append(switch)
    elif switch:
        reasons.append(switch)
    return plans, reasons


def _switch_plan(ir: Algo, topology: Topology, name: str) -> PlanCandidate | str | None:
    """The IR as switch-channel ops where the topology has NVLink SHARP and the IR's steps are one group
    reduce + broadcast per chunk (collsynth.emit.mscclpp_switch); None where that pattern is absent (not a
    failure); a reason when the switch plan fails the interpreter."""
    from collsynth.emit.mscclpp_switch import ir_to_switch_plan, switch_owners

    if not supports_switch_channels(topology.name) or topology.num_machines != 1:
        return None
    if isinstance(switch_owners(ir), str):
        return None
    label = f"{name}/switch"
    try:
        plan = ir_to_switch_plan(ir, topology, _plan_name(label))
        checked_plan(plan)
    except CollsynthError as exc:
        return f"{label}: {exc}"
    return PlanCandidate(f"plan:{label}", plan, name)


def library_plan_candidates(topology: Topology, collective: str, inplace: bool = True) -> list[PlanCandidate]:
    return [PlanCandidate(f"plan:{item.variant.name}", item.plan, "library")
            for item in mscclpp_plans(topology, collective, inplace)]


def _plan_name(label: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in label)


def plan_times(plans: Sequence[PlanCandidate], topology: Topology, sizes: Sequence[int],
               dtype: str = "float32") -> dict[str, list[float]]:
    """Every plan's predicted time (us) per size."""
    from collsynth.sim.mscclpp import simulate_plan

    return {p.name: [row.time_us for row in simulate_plan(p.plan, topology, list(sizes), dtype=dtype).rows]
            for p in plans}


@dataclass(frozen=True)
class BackendChoice:
    """Per size: the winner overall, and the best of each backend (name, time; None when it had none)."""

    size_bytes: int
    backend: str  # "ir" or "mscclpp"
    name: str
    time_us: float
    best_ir: tuple[str, float] | None
    best_plan: tuple[str, float] | None

    def to_dict(self) -> dict[str, Any]:
        return {"size": self.size_bytes, "backend": self.backend, "name": self.name, "time_us": self.time_us,
                "best_ir": list(self.best_ir) if self.best_ir else None,
                "best_plan": list(self.best_plan) if self.best_plan else None}


def choose_backends(sizes: Sequence[int], ir_times: Mapping[str, Sequence[float]],
                    plan_times: Mapping[str, Sequence[float]], backends: Sequence[str] = BACKENDS,
                    ) -> list[BackendChoice]:
    """Per size, the fastest finite candidate of the allowed backends (ties: IR, then the name)."""
    unknown = sorted(set(backends) - set(BACKENDS))
    if unknown or not backends:
        raise CollsynthError(f"unknown backend {unknown[0] if unknown else '(none)'!r}; use ir, mscclpp or both")
    choices = []
    for k, size in enumerate(sizes):
        best_ir = _fastest(ir_times, k)
        best_plan = _fastest(plan_times, k)
        ranked = [(t, 0, "ir", n) for n, t in [best_ir] if "ir" in backends] if best_ir else []
        ranked += [(t, 1, "mscclpp", n) for n, t in [best_plan] if "mscclpp" in backends] if best_plan else []
        if not ranked:
            continue
        time_us, _, backend, name = min(ranked)
        choices.append(BackendChoice(size, backend, name, time_us, best_ir, best_plan))
    return choices


def _fastest(times: Mapping[str, Sequence[float]], k: int) -> tuple[str, float] | None:
    finite = [(t[k], n) for n, t in times.items() if math.isfinite(t[k])]
    if not finite:
        return None
    time_us, name = min(finite)
    return name, time_us


def tuned_backends(run: Any, evaluator: Any, backends: Sequence[str] = BACKENDS,
                   ) -> tuple[list[BackendChoice], list[str]]:
    """The tuner's run (collsynth.tune.search.TuneRun) per size against plans: each size's tuned IR lowered
    to plans, plus the library's plans; returns the choices and why some lowerings were refused."""
    topology, sizes = evaluator.topology, [r.size for r in run.results]
    ir_times: dict[str, list[float]] = {}
    for k, result in enumerate(run.results):  # the tuned IR of each size, named by its configuration
        if result.best is not None:
            label = f"ir:{result.best.label()}"
            ir_times.setdefault(label, [math.inf] * len(sizes))[k] = result.timing.time_us
    lowered: dict[Any, list[PlanCandidate]] = {}
    reasons: list[str] = []
    for result in run.results:
        if result.best is not None and result.best not in lowered and "mscclpp" in backends:
            plans, why = lowered_plans(evaluator.ir(result.best), topology, result.best.label())
            lowered[result.best] = plans
            reasons += why
    library = library_plan_candidates(topology, run.collective) if "mscclpp" in backends else []
    times = plan_times(library, topology, sizes, evaluator.dtype)
    for k, result in enumerate(run.results):  # a lowered plan competes at the sizes its IR was tuned for
        for plan in lowered.get(result.best, []):
            row = plan_times([plan], topology, [result.size], evaluator.dtype)[plan.name][0]
            times.setdefault(plan.name, [math.inf] * len(sizes))[k] = row
    return choose_backends(sizes, ir_times, times, backends), reasons


def backend_table(choices: Sequence[BackendChoice]) -> str:
    from collsynth.core.units import format_size

    lines = [f"# {'size':>8}  {'backend':<8}  {'time (us)':>10}  {'best IR (us)':>12}  {'best plan (us)':>14}  "
             "winner (runner-up of the other backend)"]
    for c in choices:
        ir = f"{c.best_ir[1]:12.2f}" if c.best_ir else f"{'-':>12}"
        plan = f"{c.best_plan[1]:14.2f}" if c.best_plan else f"{'-':>14}"
        other = c.best_plan if c.backend == "ir" else c.best_ir
        lines.append(f"  {format_size(c.size_bytes):>8}  {c.backend:<8}  {c.time_us:10.2f}  {ir}  {plan}  {c.name}"
                     + (f" ({other[0]})" if other else ""))
    return "\n".join(lines)
