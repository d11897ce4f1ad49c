"""The SCCL encoding of one synthesis instance (collective, topology, chunks C, steps S, rounds R) in z3.

Model (SCCL, PPoPP'21): the algorithm runs in S synchronous steps; step t takes R_t >= 1 rounds and
every link carries at most `bandwidth * R_t` chunks in it (a switch: its budget times R_t); a chunk
received in step t can be forwarded from step t+1 on; the algorithm has R = sum R_t rounds.

The encoding is Boolean with pseudo-Boolean (cardinality) constraints:
- `snd[c, u, v, t]`: chunk c crosses link u->v in step t. Only *useful* sends get a variable: u can hold c
  by step t, v does not start with c, and v can still pass c on to a rank that needs it in the steps left
  (hop distances). Dropping the useless sends of an algorithm keeps it an algorithm: no solution is lost.
- `extra[t, k]` (k = 1..K_t): step t has more than k rounds (order encoding, R_t = 1 + sum_k extra[t, k]);
  K_t stops where step t's busiest link could not use more rounds.
"Is there an algorithm with at most R rounds?" is asked through an assumption literal guarding
`sum R_t <= R`, so one solver answers for every R and keeps what it learnt in between.

With `symmetries` (collsynth.topologies.symmetry), only algorithms invariant under them are encoded: one
variable per orbit of sends (sound for sat answers only). Each encoding lives in its own z3 context (or
the one its caller passes, so that a portfolio's encodings share one resource counter): what z3 learnt in
one solve never reaches another, so an answer depends on its question alone, in any process.

`SCCLEncoding` takes non-combining collectives (`collsynth.synth.problem` turns Reduce / ReduceScatter
into their non-combining duals on the reversed topology); `AllReduceEncoding` (`sccl_allreduce`) encodes
AllReduce directly. The search over these encodings (portfolio, restarts) is `collsynth.synth.portfolio`.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import partial
from math import ceil
from typing import TypeVar

import z3

from collsynth.collectives import Collective
from collsynth.core.enums import Op, Status
from collsynth.core.errors import CollsynthError
from collsynth.topologies import Topology
from collsynth.topologies import symmetry as topology_symmetry
from collsynth.topologies.symmetry import MAX_AUTOMORPHISMS, Symmetry, orbits, reversed_topology

# z3 reads its "rlimit" parameter as 32 bits (larger values wrap around): slices stop growing here.
MAX_SLICE_UNITS = 2**32 - 1

SendKey = tuple[int, int, int, int]  # (chunk, src, dst, step)
Key = TypeVar("Key", bound=tuple[int, ...])  # what a symmetry moves: a send key, a (chunk, rank) pair, ...
# Per step: (rounds, sends); a send is (chunk, src, dst), a copy, or (chunk, src, dst, "reduce").
Schedule = tuple[tuple[int, tuple[tuple, ...]], ...]

__all__ = ["MAX_SLICE_UNITS", "EncodingError", "InstanceOutcome", "SCCLEncoding", "Schedule", "StepEncoding",
           "Symmetry", "chunk_destinations", "distances_from", "distances_to", "instance_symmetries", "orbits",
           "resource_count", "reversed_topology", "tight_rounds"]


class EncodingError(CollsynthError):
    """An instance the SMT encoding cannot take (the message says why and what to do)."""


@dataclass(frozen=True)
class InstanceOutcome:
    """The answer to "is there an algorithm with `steps` steps and at most `rounds` rounds?".

    For sat, `rounds` is the number of rounds of the schedule found (<= the limit asked) and `schedule`
    holds per step `(rounds, sends)`; otherwise `rounds` is the limit that was asked and `schedule` is None."""

    status: Status
    chunks: int
    steps: int
    rounds: int
    schedule: Schedule | None
    seconds: float


def resource_count(solver: z3.Solver) -> int:
    """z3's resource counter ("rlimit count"): deterministic work done so far in the solver's context (every
    solver of a context shares it; the "rlimit" parameter caps one check() relative to it)."""
    try:
        return int(solver.statistics().get_key_value("rlimit count"))
    except z3.Z3Exception:  # not counted yet
        return 0


def chunk_destinations(collective: Collective) -> tuple[frozenset[int], ...]:
    """Per chunk, the ranks that must receive it: post(c) minus pre(c)."""
    return tuple(post - pre for pre, post in zip(collective.pre, collective.post, strict=True))


def distances_from(topology: Topology, sources: Iterable[int]) -> list[float]:
    """Hop distance from the nearest of `sources` to every rank (inf when unreachable)."""
    dist = topology.distances
    srcs = list(sources)
    return [min((dist[s][r] for s in srcs), default=float("inf")) for r in range(topology.num_ranks)]


def distances_to(topology: Topology, targets: Iterable[int]) -> list[float]:
    """Hop distance from every rank to the nearest of `targets` (inf when none is reachable)."""
    dist = topology.distances
    dsts = list(targets)
    return [min((dist[r][d] for d in dsts), default=float("inf")) for r in range(topology.num_ranks)]


def instance_symmetries(topology: Topology, collective: Collective, limit: int = MAX_AUTOMORPHISMS) -> list[Symmetry]:
    """The instance's symmetries (rank map, chunk map): `collsynth.topologies.symmetry.instance_symmetries`
    with each chunk named by its (pre, post) rank sets."""
    signatures = list(zip(collective.pre, collective.post, strict=True))
    return topology_symmetry.instance_symmetries(topology, signatures, limit)


class StepEncoding:
    """What every encoding shares: steps with R_t rounds each (order-encoded `extra`), capacity per link and
    switch, "at most R rounds" through guard literals, fixed splits through assumptions, and decoding.

    Subclasses build `self.link_sends[(u, v, t)]` (the send variables that use link u->v in step t) and
    `self.decoded[(chunk, src, dst, step, op)]` (the variable of each send a schedule can contain)."""

    def __init__(self, topology: Topology, collective: Collective, steps: int, *, symmetries: Sequence[Symmetry] = (),
                 interruptible: bool = True, max_rounds: int | None = None,
                 context: z3.Context | None = None) -> None:
        if topology.num_ranks != collective.num_ranks:
            raise EncodingError(f"topology {topology.name} has {topology.num_ranks} ranks but the collective has "
                                f"{collective.num_ranks}")
        if steps < 1:
            raise EncodingError(f"steps must be >= 1, got {steps}")
        self.topology = topology
        self.collective = collective
        self.steps = steps
        self.symmetries = tuple(symmetries)
        # Ctrl-C cancels a running check (raised as KeyboardInterrupt); worker processes leave it to the parent.
        self.interruptible = interruptible
        # No question will allow more rounds than this: no step needs more than max_rounds - (steps - 1).
        self.round_cap = max_rounds
        # A context of its own (or the caller's): no state of an earlier solve reaches this one.
        self.context = context if context is not None else z3.Context()
        self.solver = z3.Solver(ctx=self.context)
        self.link_sends: dict[tuple[int, int, int], list[z3.BoolRef]] = defaultdict(list)
        self.decoded: dict[tuple[int, int, int, int, str], z3.BoolRef] = {}
        self.extra: list[list[z3.BoolRef]] = [[] for _ in range(steps)]
        self._round_guards: dict[int, z3.BoolRef] = {}
        # Why no algorithm exists whatever the rounds (None when one may exist).
        self.infeasible_reason: str | None = None
        self._build()
        if self.infeasible_reason is None:
            self._build_rounds()

    def _build(self) -> None:
        raise NotImplementedError

    def _moves_on(self, act: Callable[[Symmetry, Key], Key]) -> list[Callable[[Key], Key]]:
        return [partial(act, g) for g in self.symmetries]

    def _build_rounds(self) -> None:
        # A step never needs more rounds than its busiest link or switch could be asked to carry.
        for t in range(self.steps):
            need = 1
            for link in self.topology.link_list:
                need = max(need, ceil(len(self.link_sends.get((link.src, link.dst, t), ())) / link.bandwidth))
            for switch in self.topology.switches:
                total = sum(len(self.link_sends.get((a, b, t), ())) for a, b in switch.links)
                need = max(need, ceil(total / switch.bandwidth))
            if self.round_cap is not None:
                need = max(1, min(need, self.round_cap - (self.steps - 1)))
            self.extra[t] = [z3.Bool(f"extra_{t}_{k}", self.context) for k in range(1, need)]
        add = self.solver.add
        add(*rounds_order(self.extra))
        add(*link_capacity(self.topology, self.link_sends, self.extra))
        add(*switch_capacity(self.topology, self.link_sends, self.extra))

    @property
    def max_useful_rounds(self) -> int:
        """More rounds than this never help (every step at its busiest link's full load)."""
        return self.steps + sum(len(x) for x in self.extra)

    def solve(self, max_rounds: int, time_limit: float | None = None, seed: int = 0,
              split: Sequence[int] | None = None, units: int | None = None) -> InstanceOutcome:
        """Look for an algorithm with at most `max_rounds` rounds (with `split`: exactly split[t] rounds in
        step t) within `time_limit` seconds and `units` z3 resource units; running out of either is reported
        as a time-out."""
        start = time.perf_counter()
        chunks = self.collective.chunks
        if self.infeasible_reason is not None or max_rounds < self.steps:
            return InstanceOutcome(Status.UNSAT, chunks, self.steps, max_rounds, None, time.perf_counter() - start)
        assumptions = []
        if split is not None:
            assumptions += [e if k < r - 1 else z3.Not(e) for r, step in zip(split, self.extra, strict=True)
                            for k, e in enumerate(step)]
        elif max_rounds < self.max_useful_rounds:
            assumptions.append(self._rounds_guard(max_rounds))
        self.solver.set("timeout", max(1, int(time_limit * 1000)) if time_limit else 4294967295)
        limit = 0 if units is None else max(1, min(units, MAX_SLICE_UNITS))
        self.solver.set("rlimit", limit)  # relative to the count at the start of check(); 0: no limit
        self.solver.set("random_seed", seed)
        self.solver.set("ctrl_c", self.interruptible)
        used_before = resource_count(self.solver)
        answer = self.solver.check(*assumptions)
        seconds = time.perf_counter() - start
        if answer == z3.unsat:
            return InstanceOutcome(Status.UNSAT, chunks, self.steps, max_rounds, None, seconds)
        if answer != z3.sat:
            # z3 is complete here and gives the same reason ("canceled") for the resource limit, the time-out
            # and Ctrl-C: "unknown" with units left, well before the time limit, means Ctrl-C
            out_of_units = limit > 0 and resource_count(self.solver) - used_before >= limit
            out_of_time = time_limit is not None and seconds >= 0.9 * time_limit - 0.05
            if self.interruptible and not out_of_units and not out_of_time:
                raise KeyboardInterrupt
            return InstanceOutcome(Status.TIMEOUT, chunks, self.steps, max_rounds, None, seconds)
        schedule = self._decode(self.solver.model())
        rounds = sum(r for r, _ in schedule)
        return InstanceOutcome(Status.SAT, chunks, self.steps, rounds, schedule, time.perf_counter() - start)

    def _rounds_guard(self, max_rounds: int) -> z3.BoolRef:
        guard = self._round_guards.get(max_rounds)
        if guard is None:
            guard = z3.Bool(f"rounds_at_most_{max_rounds}", self.context)
            self._round_guards[max_rounds] = guard
            self.solver.add(total_rounds(guard, self.extra, max_rounds - self.steps))
        return guard

    def _decode(self, model: z3.ModelRef) -> Schedule:
        per_step: list[list[tuple]] = [[] for _ in range(self.steps)]
        for (c, u, v, t, op), var in self.decoded.items():
            if z3.is_true(model.eval(var, model_completion=True)):
                per_step[t].append((c, u, v) if op == Op.COPY else (c, u, v, op))
        return tuple((tight_rounds(self.topology, sends), tuple(sorted(sends))) for sends in per_step)


class SCCLEncoding(StepEncoding):
    """The SCCL encoding of a non-combining collective on a topology in exactly `steps` steps.

    With `symmetries`, only algorithms invariant under them are encoded (sound for sat answers only).
    `solve(max_rounds, time_limit, seed)` asks for an algorithm with at most `max_rounds` rounds; successive
    calls reuse the same solver (and what it learnt)."""

    def _build(self) -> None:
        if self.collective.combining:
            raise EncodingError(f"{self.collective.name} is a combining collective; encode its non-combining dual "
                                "(collsynth.synth.problem) or use AllReduceEncoding")
        keys = self._useful_sends()
        if self.infeasible_reason is not None:
            return
        rep = self._representatives(keys)
        names = {key: z3.Bool("snd_{}_{}_{}_{}".format(*key), self.context) for key in keys if rep[key] == key}
        self.snd: dict[SendKey, z3.BoolRef] = {key: names[rep[key]] for key in keys}
        incoming: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]] = defaultdict(list)
        outgoing: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]] = defaultdict(list)
        for (c, u, v, t), var in self.snd.items():
            incoming[(c, v)].append((t, var))
            outgoing[(c, u)].append((t, var))
            self.link_sends[(u, v, t)].append(var)
            self.decoded[(c, u, v, t, Op.COPY)] = var
        # Under a symmetry restriction the constraints of one orbit are images of each other: keep one.
        own = {key: var for key, var in self.snd.items() if rep[key] == key}
        chunk_rank = orbits(incoming, self._moves_on(lambda g, x: (g[1][x[0]], g[0][x[1]])))
        own_in = {k: v for k, v in incoming.items() if chunk_rank[k] == k}
        destinations = chunk_destinations(self.collective)
        add = self.solver.add
        add(*one_source(own_in))
        add(*postcondition(destinations, incoming, set(own_in)))
        add(*hold_before_send(self.collective, own, incoming))
        add(*relay_forwards(self.collective, own, outgoing))

    def _useful_sends(self) -> list[SendKey]:
        keys: list[SendKey] = []
        for c, dests in enumerate(chunk_destinations(self.collective)):
            if not dests:
                continue
            pre = self.collective.pre[c]
            from_pre = distances_from(self.topology, pre)
            far = [d for d in sorted(dests) if from_pre[d] > self.steps]
            if far:
                hops = from_pre[far[0]]
                self.infeasible_reason = (f"chunk {c} cannot reach rank {far[0]} in {self.steps} steps "
                                          f"({'unreachable' if hops == float('inf') else f'{hops:.0f} hops away'})")
                return []
            to_dest = distances_to(self.topology, dests)
            for t in range(self.steps):
                for link in self.topology.link_list:
                    u, v = link.src, link.dst
                    if from_pre[u] <= t and v not in pre and t + 1 + to_dest[v] <= self.steps:
                        keys.append((c, u, v, t))
        return keys

    def _representatives(self, keys: list[SendKey]) -> dict[SendKey, SendKey]:
        if not self.symmetries:
            return {key: key for key in keys}
        return orbits(keys, self._moves_on(lambda g, k: (g[1][k[0]], g[0][k[1]], g[0][k[2]], k[3])))


def tight_rounds(topology: Topology, sends: Sequence[tuple]) -> int:
    """The fewest rounds (>= 1) that carry these sends of one step: max over links and switches of load/bw."""
    load: dict[tuple[int, int], int] = defaultdict(int)
    for send in sends:
        load[(send[1], send[2])] += 1
    need = 1
    for (u, v), count in load.items():
        need = max(need, ceil(count / topology.bandwidth(u, v)))
    for switch in topology.switches:
        total = sum(load.get(link, 0) for link in switch.links)
        need = max(need, ceil(total / switch.bandwidth))
    return need


# --- constraint families (one function each) ----------------------------------------------------

def one_source(incoming: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]]) -> list[z3.BoolRef]:
    # sum_{u,t} snd[c,u,v,t] <= 1 for every (c, v): a rank receives a chunk at most once
    return [z3.AtMost(*[var for _, var in sends], 1) for sends in incoming.values() if len(sends) > 1]


def postcondition(destinations: Sequence[frozenset[int]], incoming: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]],
                  own: set[tuple[int, int]]) -> list[z3.BoolRef]:
    # OR_{u,t} snd[c,u,d,t] for every d in post(c) \ pre(c)
    return [z3.Or(*[var for _, var in incoming[(c, d)]]) for c, dests in enumerate(destinations)
            for d in sorted(dests) if (c, d) in own]


def hold_before_send(collective: Collective, snd: dict[SendKey, z3.BoolRef],
                     incoming: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]]) -> list[z3.BoolRef]:
    # snd[c,u,v,t] -> u in pre(c) or OR_{w, t' < t} snd[c,w,u,t']
    clauses = []
    for (c, u, _, t), var in snd.items():
        if u not in collective.pre[c]:
            clauses.append(z3.Or(z3.Not(var), *[x for t2, x in incoming.get((c, u), []) if t2 < t]))
    return clauses


def relay_forwards(collective: Collective, snd: dict[SendKey, z3.BoolRef],
                   outgoing: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]]) -> list[z3.BoolRef]:
    # snd[c,u,v,t] and v not in post(c) -> OR_{w, t' > t} snd[c,v,w,t']  (no useless receives)
    clauses = []
    for (c, _, v, t), var in snd.items():
        if v not in collective.post[c]:
            clauses.append(z3.Or(z3.Not(var), *[x for t2, x in outgoing.get((c, v), []) if t2 > t]))
    return clauses


def rounds_order(extra: Sequence[Sequence[z3.BoolRef]]) -> list[z3.BoolRef]:
    # extra[t,k] -> extra[t,k-1]  (order encoding of R_t = 1 + sum_k extra[t,k])
    return [z3.Implies(step[k], step[k - 1]) for step in extra for k in range(1, len(step))]


def link_capacity(topology: Topology, link_sends: dict[tuple[int, int, int], list[z3.BoolRef]],
                  extra: Sequence[Sequence[z3.BoolRef]]) -> list[z3.BoolRef]:
    # sum_c snd[c,u,v,t] <= bw(u,v) * R_t
    constraints = {}
    for (u, v, t), sends in link_sends.items():
        if len(sends) > topology.bandwidth(u, v):
            constraint = _capacity(sends, topology.bandwidth(u, v), extra[t])
            constraints[constraint.get_id()] = constraint  # symmetric images collapse to one
    return list(constraints.values())


def switch_capacity(topology: Topology, link_sends: dict[tuple[int, int, int], list[z3.BoolRef]],
                    extra: Sequence[Sequence[z3.BoolRef]]) -> list[z3.BoolRef]:
    # sum_{(u,v) in switch} sum_c snd[c,u,v,t] <= bw(switch) * R_t
    constraints = {}
    for switch in topology.switches:
        for t in range(len(extra)):
            sends = [var for a, b in sorted(switch.links) for var in link_sends.get((a, b, t), [])]
            if len(sends) > switch.bandwidth:
                constraint = _capacity(sends, switch.bandwidth, extra[t])
                constraints[constraint.get_id()] = constraint
    return list(constraints.values())


def _capacity(sends: Sequence[z3.BoolRef], bandwidth: int, extra: Sequence[z3.BoolRef]) -> z3.BoolRef:
    # sum sends - bw * sum_k extra[k] <= bw   (i.e. sum sends <= bw * (1 + sum_k extra[k]))
    return z3.PbLe([(x, 1) for x in sends] + [(e, -bandwidth) for e in extra], bandwidth)


def total_rounds(guard: z3.BoolRef, extra: Sequence[Sequence[z3.BoolRef]], max_extra: int) -> z3.BoolRef:
    # guard -> sum_t R_t <= R, i.e. sum_{t,k} extra[t,k] <= R - S
    flat = [e for step in extra for e in step]
    return z3.Implies(guard, z3.AtMost(*flat, max_extra) if flat else z3.BoolVal(True, guard.ctx))
