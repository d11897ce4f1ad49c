"""`hierarchical(topology, collective, size)`: AllReduce, AllGather, ReduceScatter and AllToAll on N
identical nodes, composed from per-node and per-rail phase schedules (issue 10, item 3).

In the spirit of SCCL's distributors and MSCCL++'s 2PH: a plan (`hier_plans`) splits the collective into
phases, each a small collective run by every node at once or by every rail (the GPUs of one index across
nodes, one NIC each) at once. Each phase's schedule comes from a source (`hier_phases`: direct, ring,
recursive doubling, the SCCL least-steps SMT synthesizer, or the time-expanded greedy), is synthesized once
on the group's sub-topology and replicated over the groups, each phase chunk standing for a block of global
chunks. A phase step becomes one global step whose rounds are the fewest that fit the global links and
switch budgets. The result is a step-based `Algorithm` (lowered and compiled like the SMT ones), verified.

Every (plan, node source, rail source) combination that applies is a candidate, and for AllToAll also the
three-step gateway composition (`hier_gateway`: one bulk message per node pair, for small sizes);
`algorithms` holds them all, best first by the alpha-beta model time at the requested size
(`model_time_us`). Which one is fastest in simulation depends on the size (direct phases have the fewest
steps, rings the fewest bytes per NIC message): the catalog keeps each, and per size range the fastest simulated wins.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace

from collsynth.collectives import Collective
from collsynth.core.costs import MIB
from collsynth.core.enums import Status
from collsynth.schedule import Algorithm, Send, StageReport, Step, SynthesisResult, verify
from collsynth.synth.cluster.hier_gateway import ASSIGNMENTS, gateway_alltoall
from collsynth.synth.cluster.hier_phases import PHASE_SOURCES, min_rounds, phase_schedule
from collsynth.synth.cluster.hier_plans import PLANS, Groups, Phase
from collsynth.synth.cluster.timexp import GreedyError
from collsynth.topologies import Switch, Topology

SUPPORTED = tuple(PLANS)
NODE_SOURCES = ("direct", "ring", "smt")  # tried by default inside a node
# tried by default across nodes; not `doubling`: its compiled IR (default options) deadlocks with 8-slot FIFOs
# at 4+ nodes (bench/hier.py, docs/benchmarks.md), and it never won where it ran
RAIL_SOURCES = ("direct", "ring", "oneshot")


def groups_of(topology: Topology) -> list[list[int]]:
    """Ranks per node, each sorted; refuses one-node topologies, unequal nodes and shared NICs."""
    if topology.machines is None or topology.num_machines < 2:
        raise GreedyError(f"hierarchical: {topology.name} is one node; use `synth greedy` or `synth trees`")
    nodes: dict[int, list[int]] = {}
    for rank, node in enumerate(topology.machines):
        nodes.setdefault(node, []).append(rank)
    groups = [sorted(nodes[k]) for k in sorted(nodes)]
    if len({len(g) for g in groups}) != 1:
        raise GreedyError(f"hierarchical: the nodes of {topology.name} have different GPU counts")
    if any(len(nic) > 1 for nic in topology.nics):
        raise GreedyError(f"hierarchical: GPUs of {topology.name} share NICs, so rails are not independent; "
                          "use `synth greedy`")
    return groups


def sub_topology(topology: Topology, ranks: Sequence[int], name: str) -> Topology:
    """The links among `ranks` (renumbered 0..k-1) and the switch budgets restricted to them."""
    local = {r: i for i, r in enumerate(ranks)}
    links = tuple(replace(x, src=local[x.src], dst=local[x.dst]) for x in topology.link_list
                  if x.src in local and x.dst in local)
    switches = []
    for s in topology.switches:
        inside = frozenset((local[a], local[b]) for a, b in s.links if a in local and b in local)
        if inside:
            switches.append(Switch(s.name, inside, s.bandwidth, s.beta_us_per_mb))
    return Topology(name, len(ranks), links, tuple(switches))


def _members(groups: Groups, level: str) -> list[list[int]]:
    if level == "node":
        return [list(g) for g in groups]
    return [[group[g] for group in groups] for g in range(len(groups[0]))]


def compose(topology: Topology, collective: Collective, groups: Groups, phases: Sequence[Phase],
            schedules: Sequence[Algorithm], name: str) -> Algorithm:
    """Replicate each phase's schedule over its groups, phase after phase; verified."""
    steps: list[Step] = []
    for phase, schedule in zip(phases, schedules, strict=True):
        members = _members(groups, phase.level)
        for step in schedule.steps:
            sends = [Send(chunk, ranks[s.src], ranks[s.dst], s.op) for index, ranks in enumerate(members)
                     for s in step.sends for chunk in phase.chunks_of(index, s.chunk)]
            steps.append(Step(min_rounds(topology, sends), tuple(sends)))
    algorithm = Algorithm(name, topology, collective, tuple(steps))
    verify(algorithm)
    return algorithm


def model_time_us(algorithm: Algorithm, size_bytes: int) -> float:
    """Alpha-beta time of a step-based schedule: per step, the slowest link or switch (its alpha plus its
    sends times a chunk's beta, over its bandwidth), summed over steps."""
    topology = algorithm.topology
    coll = algorithm.collective
    chunk_mb = size_bytes / max(coll.input_chunks, coll.output_chunks) / MIB
    total = 0.0
    for step in algorithm.steps:
        per_link = Counter((s.src, s.dst) for s in step.sends)
        slowest = 0.0
        for (a, b), count in per_link.items():
            link = topology.link_between(a, b)
            assert link is not None
            slowest = max(slowest, link.alpha_us + count / link.bandwidth * chunk_mb * link.beta_us_per_mb)
        for switch in topology.switches:
            through = sum(per_link[x] for x in switch.links if x in per_link)
            if through:
                slowest = max(slowest, through / switch.bandwidth * chunk_mb * switch.beta_us_per_mb)
        total += slowest
    return total


def _sources(level: str, chosen: Sequence[str] | None) -> tuple[str, ...]:
    default = NODE_SOURCES if level == "node" else RAIL_SOURCES
    return tuple(chosen) if chosen else default


def _candidates(topology: Topology, collective: Collective, groups: Groups, sources: Sequence[str] | None,
                time_limit: float, deadline: float | None) -> tuple[list[Algorithm], list[StageReport]]:
    cache: dict[tuple[str, str, str, int], Algorithm | None] = {}
    out: list[Algorithm] = []
    stages: list[StageReport] = []
    subs = {"node": sub_topology(topology, groups[0], f"{topology.name}.node"),
            "rail": sub_topology(topology, [g[0] for g in groups], f"{topology.name}.rail")}
    for plan_name, plan in PLANS[collective.name].items():
        phases = plan(groups, collective.chunks)
        for node_source in _sources("node", sources):
            for rail_source in _sources("rail", sources):
                began = time.perf_counter()
                label = f"{plan_name} node={node_source} rail={rail_source}"
                if out and deadline is not None and began > deadline:  # anytime: keep what was composed
                    stages.append(StageReport(label, 0.0, "skipped: budget spent"))
                    continue
                schedules = []
                for phase in phases:
                    source = node_source if phase.level == "node" else rail_source
                    key = (phase.level, phase.collective.name, source, phase.collective.num_ranks)
                    if key not in cache:
                        cache[key] = phase_schedule(source, subs[phase.level], phase.collective, time_limit)
                    schedules.append(cache[key])
                if any(s is None for s in schedules):
                    stages.append(StageReport(label, time.perf_counter() - began, "does not apply"))
                    continue
                name = f"hier-{collective.name}-{topology.name}-{plan_name}-{node_source}-{rail_source}"
                algorithm = compose(topology, collective, groups, phases, [s for s in schedules if s], name)
                twin = next((a.name for a in out if a.steps == algorithm.steps), None)
                if twin is not None:  # e.g. every rail source is the same exchange on two nodes
                    stages.append(StageReport(label, time.perf_counter() - began, f"same schedule as {twin}"))
                    continue
                algorithm = replace(algorithm, provenance={
                    "synthesizer": "hierarchical", "plan": plan_name, "node_source": node_source,
                    "rail_source": rail_source, "phases": [f"{p.level} {p.collective.name}" for p in phases]})
                out.append(algorithm)
                stages.append(StageReport(label, time.perf_counter() - began, f"{algorithm.num_steps} steps"))
    return out, stages


def _gateway_candidate(topology: Topology, collective: Collective,
                       groups: Groups) -> tuple[list[Algorithm], StageReport]:
    """AllToAll only: the three-step gateway compositions (hier_gateway), few large inter-node messages, one
    per gateway assignment (provenance "rail_source": round-robin or rail)."""
    began = time.perf_counter()
    found: list[Algorithm] = []
    for assignment in ASSIGNMENTS:
        name = f"hier-alltoall-{topology.name}-gateway-direct-{assignment}"
        algorithm = gateway_alltoall(topology, collective, groups, name, assignment)
        if algorithm is not None and all(algorithm.steps != a.steps for a in found):  # 2 nodes: one schedule
            found.append(replace(algorithm, provenance={
                "synthesizer": "hierarchical", "plan": "gateway", "node_source": "direct",
                "rail_source": assignment, "phases": ["node gather", "gateway bulk", "node scatter"]}))
    if not found:
        return [], StageReport("gateway", time.perf_counter() - began, "does not apply")
    return found, StageReport("gateway", time.perf_counter() - began, f"{len(found)} x {found[0].num_steps} steps")


def hierarchical(topology: Topology, collective: Collective, size_bytes: int = 1 << 30, *,
                 sources: Sequence[str] | None = None, time_limit: float = 20.0,
                 deadline: float | None = None) -> SynthesisResult:
    """Every applicable hierarchical composition (see the module docstring), best first at `size_bytes`;
    `time_limit` bounds each SMT phase solve; past `deadline` (a `time.perf_counter()` value) no further
    candidate is composed once one exists."""
    if collective.name not in SUPPORTED:
        raise GreedyError(f"hierarchical: composes {', '.join(SUPPORTED)}, not {collective.name!r}; use "
                          "`synth greedy` for the others")
    unknown = sorted(set(sources or ()) - set(PHASE_SOURCES))
    if unknown:
        raise GreedyError(f"hierarchical: unknown phase source {unknown[0]!r}; use some of {', '.join(PHASE_SOURCES)}")
    if collective.num_ranks != topology.num_ranks:
        raise GreedyError(f"hierarchical: collective has {collective.num_ranks} ranks, topology {topology.name} "
                          f"has {topology.num_ranks}; make them match")
    began = time.perf_counter()
    groups = groups_of(topology)
    found, stages = _candidates(topology, collective, groups, sources, time_limit, deadline)
    if collective.name == "alltoall" and (not found or deadline is None or time.perf_counter() <= deadline):
        extra, report = _gateway_candidate(topology, collective, groups)
        found, stages = found + extra, stages + [report]
    if not found:
        raise GreedyError(f"hierarchical: no phase source applies to {topology.name} (missing links inside a "
                          "node or a rail); use `synth greedy`")
    timed = sorted(((model_time_us(a, size_bytes), i, a) for i, a in enumerate(found)), key=lambda x: x[:2])
    best = [replace(a, provenance={**a.provenance, "size_bytes": size_bytes, "model_time_us": round(t, 3)})
            for t, _, a in timed]
    provenance = {"synthesizer": "hierarchical", "size_bytes": size_bytes, "candidates": len(best),
                  "best": best[0].name, "model_time_us": round(timed[0][0], 3)}
    return SynthesisResult(Status.SAT, tuple(best), None, "time_us", "hierarchical", time.perf_counter() - began,
                           provenance, tuple(stages), topology=topology, collective=collective)
