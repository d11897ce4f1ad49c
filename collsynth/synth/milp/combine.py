"""Combining collectives from non-combining schedules, and the Algorithm a timed schedule becomes.

ReduceScatter and Reduce are the reverse of an AllGather / Broadcast schedule (`schedule.reversed_sends`:
each send reversed into a reduction, mirrored in time, its dependencies turned around); AllReduce is that
ReduceScatter followed by the AllGather, merged and re-timed. `to_algorithm` turns timed transfers into steps."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from collsynth.collectives import Collective
from collsynth.core.enums import Op
from collsynth.encodings.milp_ordering import (
    Orders,
    ScheduleError,
    ScheduleProblem,
    Timing,
    Transfer,
    evaluate,
    orders_from_times,
)
from collsynth.schedule.algorithm import Algorithm, Send, Step
from collsynth.schedule.transforms import TimedSends, reversed_sends
from collsynth.synth.milp.errors import MilpSynthesisError
from collsynth.synth.milp.schedule_stage import Candidate
from collsynth.topologies import Topology


def reversed_candidate(forward: Candidate, topology: Topology) -> Candidate:
    """The reduction of `forward` (a non-combining schedule on `topology`'s reverse), ordered as the mirror
    image of `forward` in time and timed: what the reduction's scheduling MILP starts from."""
    problem, mirrored_start = reversed_problem(forward, topology)
    orders = _mirror(forward, problem, mirrored_start)
    return Candidate(problem, orders, evaluate(problem, orders))


def reversed_problem(schedule: Candidate, topology: Topology) -> tuple[ScheduleProblem, list[float]]:
    """The reduction schedule (`schedule.reversed_sends` on the transfers, their times and dependencies): every
    transfer reversed into a reduction that waits for the reductions of the transfers that depended on it, and
    the mirrored start times."""
    topo = topology
    problem, timing = schedule.problem, schedule.timing
    for tr in problem.transfers:
        if not topo.has_link(tr.dst, tr.src):
            raise MilpSynthesisError(f"cannot reverse the schedule: topology {topo.name!r} has link {tr.src}->{tr.dst} "
                                     f"but no link {tr.dst}->{tr.src}")
    start = np.array(timing.start, dtype=float)
    chunk, src, dst = (np.array([getattr(tr, key) for tr in problem.transfers], dtype=np.int64)
                       for key in ("chunk", "src", "dst"))
    duration = np.array(timing.arrival, dtype=float) - start
    sends = reversed_sends(TimedSends(chunk, src, dst, start, duration, timing.makespan,
                                      tuple(tr.deps for tr in problem.transfers)))
    assert sends.after is not None
    transfers = tuple(Transfer(c, s, d, Op.REDUCE, deps) for c, s, d, deps in
                      zip(sends.chunk.tolist(), sends.src.tolist(), sends.dst.tolist(), sends.after, strict=True))
    return replace(problem, transfers=transfers, link_class={}), sends.start.tolist()


def _mirror(schedule: Candidate, reversed_problem: ScheduleProblem, mirrored_start: list[float]) -> Orders:
    """Orders of the reversed transfers: by their mirrored start times, groups kept."""
    priority = mirrored_start
    orders = orders_from_times(reversed_problem, priority)
    joins = set()
    groups: dict[int, list[int]] = {}
    for seq in schedule.orders.links.values():
        head = None
        for t in seq:
            if t in schedule.orders.joins and head is not None:
                groups[head].append(t)
            else:
                head = t
                groups[head] = [t]
    for members in groups.values():
        if len(members) > 1:
            ordered = sorted(members, key=lambda t: (priority[t], t))
            joins.update(ordered[1:])
    mirrored = replace(orders, joins=frozenset(joins))
    try:
        evaluate(reversed_problem, mirrored)
    except ScheduleError:
        return orders
    return mirrored


def concatenate(first: Candidate, second: Candidate, owners: Mapping[int, int]) -> tuple[ScheduleProblem, Orders]:
    """`first` (a reduction) then `second` (an AllGather of the reduced chunks): a chunk's gather sends wait
    for every reduction of that chunk into its owner."""
    offset = len(first.problem.transfers)
    into_owner: dict[int, list[int]] = {}
    for t, tr in enumerate(first.problem.transfers):
        if owners.get(tr.chunk) == tr.dst:
            into_owner.setdefault(tr.chunk, []).append(t)
    transfers = list(first.problem.transfers)
    for tr in second.problem.transfers:
        deps = tuple(d + offset for d in tr.deps)
        if tr.src == owners.get(tr.chunk):
            deps += tuple(into_owner.get(tr.chunk, ()))
        transfers.append(replace(tr, deps=deps))
    problem = replace(first.problem, transfers=tuple(transfers), link_class={})
    shift = first.timing.makespan
    priority = list(first.timing.start) + [shift + s for s in second.timing.start]
    joins = set(first.orders.joins) | {t + offset for t in second.orders.joins}
    orders = orders_from_times(problem, priority, frozenset())
    try:
        evaluate(problem, replace(orders, joins=frozenset(joins)))
        orders = replace(orders, joins=frozenset(joins))
    except ScheduleError:
        pass
    return problem, orders



def to_algorithm(name: str, topology: Topology, collective: Collective, problem: ScheduleProblem, timing: Timing,
               provenance: dict[str, Any]) -> Algorithm:
    """Steps from timed transfers: a transfer comes after the transfers it waits for (next step) and
    after earlier transfers on its link, switch ports, and reads of its destination's chunk."""
    n = len(problem.transfers)
    order = sorted(range(n), key=lambda t: (timing.start[t], timing.arrival[t], t))
    step = [0] * n
    last_on: dict[Any, int] = {}
    reads: dict[tuple[int, int], list[int]] = {}  # (chunk, rank) -> transfers that read it so far
    for t in order:
        tr = problem.transfers[t]
        s = 0
        for d in tr.deps:
            s = max(s, step[d] + 1)
        keys = [("link", tr.arc)] + [("budget", r) for r in problem.resources_of.get(tr.arc, ())]
        for key in keys:
            if key in last_on:
                s = max(s, step[last_on[key]])
        for r in reads.get((tr.chunk, tr.dst), ()):
            s = max(s, step[r])
        step[t] = s
        for key in keys:
            last_on[key] = t
        reads.setdefault((tr.chunk, tr.src), []).append(t)
    steps = []
    for s in range(max(step, default=-1) + 1):
        members = sorted((t for t in range(n) if step[t] == s), key=lambda t: (timing.start[t], t))
        if not members:
            continue
        per_link: dict[tuple[int, int], int] = {}
        for t in members:
            per_link[problem.transfers[t].arc] = per_link.get(problem.transfers[t].arc, 0) + 1
        rounds = 1
        for arc, count in per_link.items():
            rounds = max(rounds, math.ceil(count / max(1, topology.bandwidth(*arc))))
        for switch in topology.switches:
            count = sum(per_link.get(arc, 0) for arc in switch.links)
            rounds = max(rounds, math.ceil(count / max(1, switch.bandwidth)))
        sends = tuple(Send(problem.transfers[t].chunk, problem.transfers[t].src, problem.transfers[t].dst,
                           Op(problem.transfers[t].op), round(timing.start[t], 6),
                           round(timing.arrival[t] - timing.start[t], 6)) for t in members)
        steps.append(Step(rounds, sends))
    return Algorithm(name, topology, collective, tuple(steps), provenance)


