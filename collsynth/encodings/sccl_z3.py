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

Symmetry: a topology automorphism that maps the collective to itself maps algorithms to algorithms.
`InstanceSolver` first looks for an algorithm that is *invariant* under such symmetries (one variable per
orbit of sends: a much smaller problem, and SCCL-style instances usually have symmetric solutions); only
if that restricted problem is unsatisfiable or slow does the unrestricted problem decide. An unsat answer
always comes from the unrestricted problem. Solver runs are heavy-tailed, so calls are made in rounds of
growing slices with fresh random seeds (restarts) until the caller's time limit. Slices are measured in z3's
deterministic resource units, not seconds, so which call answers first (and so which of several optimal
schedules comes back) does not depend on machine load; only the overall time limit does.

`SCCLEncoding` takes non-combining collectives (`collsynth.synth.problem` turns Reduce / ReduceScatter
into their non-combining duals on the reversed topology); `AllReduceEncoding` encodes AllReduce directly,
tracking which contributions each copy of a chunk holds.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from math import ceil

import networkx as nx
import z3
from networkx.algorithms.isomorphism import DiGraphMatcher

from collsynth.collectives import Collective
from collsynth.core.errors import CollsynthError
from collsynth.topologies import Link, Switch, Topology

SAT = "sat"
UNSAT = "unsat"
TIMEOUT = "timeout"

# At most this many non-identity automorphisms are collected (fully connected graphs have n! of them).
MAX_AUTOMORPHISMS = 8
# First slice of the restart schedule, in z3 resource units (the "rlimit count" statistic: about 7-8 million
# a second on the 2-core CI class, so about half a second); slices double. Units, not seconds: the same
# calls answer on an idle and on a loaded machine.
FIRST_SLICE_UNITS = 4_000_000
# z3 reads its "rlimit" parameter as 32 bits (larger values wrap around): slices stop growing here.
MAX_SLICE_UNITS = 2**32 - 1

SendKey = tuple[int, int, int, int]  # (chunk, src, dst, step)
COPY_OP = "copy"
REDUCE_OP = "reduce"
Symmetry = tuple[tuple[int, ...], tuple[int, ...]]  # (rank map, chunk map)
# Per step: (rounds, sends); a send is (chunk, src, dst), a copy, or (chunk, src, dst, "reduce").
Schedule = tuple[tuple[int, tuple[tuple, ...]], ...]


class EncodingError(CollsynthError):
    """An instance the SMT encoding cannot take (the message says why and what to do)."""


@dataclass(frozen=True)
class InstanceOutcome:
    """The answer to "is there an algorithm with `steps` steps and at most `rounds` rounds?".

    For sat, `rounds` is the number of rounds of the schedule found (<= the limit asked) and `schedule`
    holds per step `(rounds, sends)`; otherwise `rounds` is the limit that was asked and `schedule` is None."""

    status: str
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


def reversed_topology(topology: Topology) -> Topology:
    """Every link u->v becomes v->u (same costs); switches cover the reversed links. Used for the duals
    of Reduce / ReduceScatter and by the bandwidth bound."""
    links = tuple(Link(x.dst, x.src, x.bandwidth, x.alpha_us, x.beta_us_per_mb, x.kind) for x in topology.links)
    switches = tuple(Switch(s.name, frozenset((b, a) for a, b in s.links), s.bandwidth, s.beta_us_per_mb)
                     for s in topology.switches)
    return Topology(f"reversed({topology.name})", topology.num_ranks, links, switches, topology.nodes,
                    topology.nics, description=topology.description)


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


def instance_symmetries(topology: Topology, collective: Collective,
                        limit: int = MAX_AUTOMORPHISMS) -> list[Symmetry]:
    """Non-identity symmetries of the instance as (rank map, chunk map): rank permutations that keep every
    link's bandwidth and every switch, with the chunk permutation carrying each chunk's pre/post sets to
    their images. At most `limit`; a cyclic one (a rotation) is preferred when the graph has one."""
    graph = nx.DiGraph()
    graph.add_nodes_from(range(topology.num_ranks))
    for link in topology.links:
        graph.add_edge(link.src, link.dst, bandwidth=link.bandwidth)
    by_signature: dict[tuple[frozenset[int], frozenset[int]], list[int]] = defaultdict(list)
    for c in range(collective.num_chunks):
        by_signature[(collective.pre[c], collective.post[c])].append(c)
    identity = tuple(range(topology.num_ranks))
    candidates = [_rotation(topology.num_ranks, k) for k in range(1, topology.num_ranks)]
    matcher = DiGraphMatcher(graph, graph, edge_match=lambda a, b: a["bandwidth"] == b["bandwidth"])
    for examined, mapping in enumerate(matcher.isomorphisms_iter()):
        if examined > 20 * limit:  # the matcher can enumerate n! maps: stop early
            break
        candidates.append(tuple(mapping[r] for r in range(topology.num_ranks)))
    found: list[Symmetry] = []
    seen: set[tuple[int, ...]] = set()
    for ranks in candidates:
        if ranks == identity or ranks in seen or not _is_automorphism(topology, ranks):
            continue
        chunk_map = _chunk_permutation(collective, ranks, by_signature)
        if chunk_map is not None:
            seen.add(ranks)
            found.append((ranks, chunk_map))
            if len(found) >= limit:
                break
    return found


def _rotation(n: int, k: int) -> tuple[int, ...]:
    return tuple((r + k) % n for r in range(n))


def _is_automorphism(topology: Topology, ranks: Sequence[int]) -> bool:
    for link in topology.links:
        if topology.bandwidth(ranks[link.src], ranks[link.dst]) != link.bandwidth:
            return False
    switches = {(s.links, s.bandwidth) for s in topology.switches}
    return all((frozenset((ranks[a], ranks[b]) for a, b in links), bw) in switches for links, bw in switches)


def _chunk_permutation(collective: Collective, ranks: Sequence[int],
                       by_signature: dict[tuple[frozenset[int], frozenset[int]], list[int]]) -> tuple[int, ...] | None:
    chunk_map = [0] * collective.num_chunks
    for (pre, post), chunks in by_signature.items():
        image = by_signature.get((frozenset(ranks[r] for r in pre), frozenset(ranks[r] for r in post)))
        if image is None or len(image) != len(chunks):
            return None
        for a, b in zip(chunks, image, strict=True):
            chunk_map[a] = b
    return tuple(chunk_map)


def orbits(items: Iterable[Hashable], moves: Sequence[Callable[[Hashable], Hashable]]) -> dict[Hashable, Hashable]:
    """Item -> the smallest item of its orbit under the group generated by `moves` (union-find)."""
    parent: dict[Hashable, Hashable] = {}

    def find(x: Hashable) -> Hashable:
        root = x
        while parent[root] != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    listed = list(items)
    for x in listed:
        parent[x] = x
    for move in moves:
        for x in listed:
            a, b = find(x), find(move(x))
            if a != b:
                lo, hi = (a, b) if a < b else (b, a)  # type: ignore[operator]
                parent[hi] = lo
    return {x: find(x) for x in listed}


class _StepEncoding:
    """What every encoding shares: steps with R_t rounds each (order-encoded `extra`), capacity per link and
    switch, "at most R rounds" through guard literals, fixed splits through assumptions, and decoding.

    Subclasses build `self.link_sends[(u, v, t)]` (the send variables that use link u->v in step t) and
    `self.decoded[(chunk, src, dst, step, op)]` (the variable of each send a schedule can contain)."""

    def __init__(self, topology: Topology, collective: Collective, steps: int, *, symmetries: Sequence[Symmetry] = (),
                 interruptible: bool = True, max_rounds: int | None = None) -> None:
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
        self.solver = z3.Solver()
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

    def _moves_on(self, act: Callable[[Symmetry, tuple], Hashable]) -> list[Callable[[Hashable], Hashable]]:
        return [lambda x, g=g: act(g, x) for g in self.symmetries]

    def _build_rounds(self) -> None:
        # A step never needs more rounds than its busiest link or switch could be asked to carry.
        for t in range(self.steps):
            need = 1
            for link in self.topology.links:
                need = max(need, ceil(len(self.link_sends.get((link.src, link.dst, t), ())) / link.bandwidth))
            for switch in self.topology.switches:
                total = sum(len(self.link_sends.get((a, b, t), ())) for a, b in switch.links)
                need = max(need, ceil(total / switch.bandwidth))
            if self.round_cap is not None:
                need = max(1, min(need, self.round_cap - (self.steps - 1)))
            self.extra[t] = [z3.Bool(f"extra_{t}_{k}") for k in range(1, need)]
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
            return InstanceOutcome(UNSAT, chunks, self.steps, max_rounds, None, time.perf_counter() - start)
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
            return InstanceOutcome(UNSAT, chunks, self.steps, max_rounds, None, seconds)
        if answer != z3.sat:
            # z3 is complete here and gives the same reason ("canceled") for the resource limit, the time-out
            # and Ctrl-C: "unknown" with units left, well before the time limit, means Ctrl-C
            out_of_units = limit > 0 and resource_count(self.solver) - used_before >= limit
            out_of_time = time_limit is not None and seconds >= 0.9 * time_limit - 0.05
            if self.interruptible and not out_of_units and not out_of_time:
                raise KeyboardInterrupt
            return InstanceOutcome(TIMEOUT, chunks, self.steps, max_rounds, None, seconds)
        schedule = self._decode(self.solver.model())
        rounds = sum(r for r, _ in schedule)
        return InstanceOutcome(SAT, chunks, self.steps, rounds, schedule, time.perf_counter() - start)

    def _rounds_guard(self, max_rounds: int) -> z3.BoolRef:
        guard = self._round_guards.get(max_rounds)
        if guard is None:
            guard = z3.Bool(f"rounds_at_most_{max_rounds}")
            self._round_guards[max_rounds] = guard
            self.solver.add(total_rounds(guard, self.extra, max_rounds - self.steps))
        return guard

    def _decode(self, model: z3.ModelRef) -> Schedule:
        per_step: list[list[tuple]] = [[] for _ in range(self.steps)]
        for (c, u, v, t, op), var in self.decoded.items():
            if z3.is_true(model.eval(var, model_completion=True)):
                per_step[t].append((c, u, v) if op == COPY_OP else (c, u, v, op))
        return tuple((tight_rounds(self.topology, sends), tuple(sorted(sends))) for sends in per_step)


class SCCLEncoding(_StepEncoding):
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
        names = {key: z3.Bool("snd_{}_{}_{}_{}".format(*key)) for key in keys if rep[key] == key}
        self.snd: dict[SendKey, z3.BoolRef] = {key: names[rep[key]] for key in keys}
        incoming: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]] = defaultdict(list)
        outgoing: dict[tuple[int, int], list[tuple[int, z3.BoolRef]]] = defaultdict(list)
        for (c, u, v, t), var in self.snd.items():
            incoming[(c, v)].append((t, var))
            outgoing[(c, u)].append((t, var))
            self.link_sends[(u, v, t)].append(var)
            self.decoded[(c, u, v, t, COPY_OP)] = var
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
                for link in self.topology.links:
                    u, v = link.src, link.dst
                    if from_pre[u] <= t and v not in pre and t + 1 + to_dest[v] <= self.steps:
                        keys.append((c, u, v, t))
        return keys

    def _representatives(self, keys: list[SendKey]) -> dict[Hashable, Hashable]:
        if not self.symmetries:
            return {key: key for key in keys}
        return orbits(keys, self._moves_on(lambda g, k: (g[1][k[0]], g[0][k[1]], g[0][k[2]], k[3])))


class AllReduceEncoding(_StepEncoding):
    """AllReduce encoded directly, with combining: which contributions each rank's copy of a chunk holds.

    Variables: `cp[c,u,v,t]` / `rd[c,u,v,t]`: u copies / reduces its value of chunk c into v in step t;
    `has[c,r,t,j]`: after step t, rank r's value of chunk c includes rank j's contribution. A step reads the
    values at its start; a rank takes at most one copy per step and never mixes copies and reductions
    into one chunk in one step (verify() allows identical copies, which are never needed). No
    contribution may be added twice."""

    def _build(self) -> None:
        n, steps = self.topology.num_ranks, self.steps
        if self.collective.name != "allreduce":
            raise EncodingError(f"AllReduceEncoding encodes AllReduce, not {self.collective.name}")
        far = max(self.topology.distances[a][b] for a in range(n) for b in range(n))
        if far > steps:
            self.infeasible_reason = (f"contributions need {far} steps to cross {self.topology.name}"
                                      if far != float("inf") else f"{self.topology.name} is not connected")
            return
        chunks = range(self.collective.num_chunks)
        links = [(x.src, x.dst) for x in self.topology.links]
        send_keys = [(c, u, v, t) for c in chunks for t in range(steps) for u, v in links]
        has_keys = [(c, r, t, j) for c in chunks for t in range(1, steps + 1) for r in range(n) for j in range(n)]
        rep_send = orbits(send_keys, self._moves_on(lambda g, k: (g[1][k[0]], g[0][k[1]], g[0][k[2]], k[3])))
        rep_has = orbits(has_keys, self._moves_on(lambda g, k: (g[1][k[0]], g[0][k[1]], k[2], g[0][k[3]])))
        cp_var = {k: z3.Bool("cp_{}_{}_{}_{}".format(*k)) for k in send_keys if rep_send[k] == k}
        rd_var = {k: z3.Bool("rd_{}_{}_{}_{}".format(*k)) for k in send_keys if rep_send[k] == k}
        has_var = {k: z3.Bool("has_{}_{}_{}_{}".format(*k)) for k in has_keys if rep_has[k] == k}
        self.cp = {k: cp_var[rep_send[k]] for k in send_keys}
        self.rd = {k: rd_var[rep_send[k]] for k in send_keys}

        def has(c: int, r: int, t: int, j: int) -> z3.BoolRef:
            return z3.BoolVal(r == j) if t == 0 else has_var[rep_has[(c, r, t, j)]]

        for (c, u, v, t) in send_keys:
            self.link_sends[(u, v, t)] += [self.cp[(c, u, v, t)], self.rd[(c, u, v, t)]]
            self.decoded[(c, u, v, t, COPY_OP)] = self.cp[(c, u, v, t)]
            self.decoded[(c, u, v, t, REDUCE_OP)] = self.rd[(c, u, v, t)]
        own_sends = [k for k in send_keys if rep_send[k] == k]
        own_pairs = sorted({(c, v, t) for c, _, v, t in own_sends})
        senders = {v: self.topology.in_neighbors[v] for v in range(n)}
        add = self.solver.add
        add(*copy_or_reduce(self.cp, self.rd, own_sends))
        add(*single_copy_in(self.cp, self.rd, senders, own_pairs))
        add(*no_double_count(self.rd, has, senders, own_pairs, n))
        add(*contributions_flow(self.cp, self.rd, has, senders, [k for k in has_keys if rep_has[k] == k]))
        add(*allreduce_postcondition(has, self.collective.num_chunks, n, steps))


class InstanceSolver:
    """Answers "an algorithm with `steps` steps and at most R rounds?" for successive R, with a portfolio.

    Tasks: per encoding (symmetry-restricted when the instance has symmetries, then the full one), a few
    fixed splits of the R rounds over the steps (balanced first: most of the difficulty of an instance is
    finding a feasible split, and with the split fixed a schedule is found in well under a second) and the
    open question with any split. Tasks run in rounds of doubling slices of z3 resource units with fresh
    seeds (the same answers on a loaded machine; the time limit is only the overall deadline); an unsat
    answer ends a task; only the full encoding's open question (or every split of it) proves unsat.
    Encodings are built on first use and kept for the next question (they keep what they learnt)."""

    SPLITS_PER_ENCODING = 6

    def __init__(self, topology: Topology, collective: Collective, steps: int, *, use_symmetry: bool = True,
                 interruptible: bool = True, max_rounds: int | None = None, budget: int | None = None) -> None:
        self.interruptible = interruptible
        # At most this many z3 resource units per question (then a time-out): a cap on work, not on time.
        self.budget = budget
        self.max_rounds = max_rounds  # no question will ask for more (keeps the encodings small)
        self.topology = topology
        self.collective = collective
        self.steps = steps
        self._kind = AllReduceEncoding if collective.combining and collective.name == "allreduce" else SCCLEncoding
        symmetries = instance_symmetries(topology, collective) if use_symmetry else []
        if self._kind is AllReduceEncoding:
            # every chunk is summed everywhere; symmetric schedules rotate chunk r*C+i with its rank r
            symmetries = [(ranks, tuple(ranks[c // collective.chunks] * collective.chunks + c % collective.chunks
                                        for c in range(collective.num_chunks))) for ranks, _ in symmetries]
        self._levels: list[Sequence[Symmetry]] = [symmetries] if symmetries else []
        rotations = [g for g in symmetries if _single_cycle(g[0])]
        if rotations and len(symmetries) > 1:
            self._levels.append(rotations[:1])  # weaker: a rotation alone (reflections may rule schedules out)
        self._levels.append(())
        self._encodings: dict[int, _StepEncoding] = {}
        self._restricted_unsat: dict[int, int] = {}  # level -> the largest R for which it answered unsat

    @property
    def full(self) -> _StepEncoding:
        return self._encoding(len(self._levels) - 1)

    def _encoding(self, level: int) -> _StepEncoding:
        if level not in self._encodings:
            self._encodings[level] = self._kind(self.topology, self.collective, self.steps,
                                                symmetries=self._levels[level], interruptible=self.interruptible,
                                                max_rounds=self.max_rounds)
        return self._encodings[level]

    @property
    def max_useful_rounds(self) -> int:
        return self.full.max_useful_rounds

    def solve(self, max_rounds: int, time_limit: float | None = None) -> InstanceOutcome:
        """The portfolio answer; unsat only from the unrestricted encoding; timeout after `time_limit` seconds
        or once the solver's `budget` of resource units is spent."""
        start = time.perf_counter()
        deadline = None if time_limit is None else start + time_limit
        full = len(self._levels) - 1
        if self.full.infeasible_reason is not None or max_rounds < self.steps:
            return self.full.solve(max_rounds)
        if max_rounds >= self.full.max_useful_rounds:
            # Any split will do: the open question is easy. Unlimited rounds are always enough.
            outcome = self.full.solve(max_rounds, time_limit, units=self.budget)
            return _with_seconds(outcome, time.perf_counter() - start)
        units_at_start = resource_count(self.full.solver)
        splits = list(balanced_splits(max_rounds, [1 + len(x) for x in self.full.extra], self.SPLITS_PER_ENCODING + 1))
        complete = len(splits) <= self.SPLITS_PER_ENCODING  # then refuting every split proves unsat
        splits = splits[:self.SPLITS_PER_ENCODING]
        tasks: list[tuple[int, tuple[int, ...] | None]] = []
        for level in range(len(self._levels)):
            if level == full or self._restricted_unsat.get(level, -1) < max_rounds:
                tasks += [(level, split) for split in splits] + [(level, None)]
        refuted: set[tuple[int, ...]] = set()
        for attempt in range(64):
            for task in list(tasks):
                if task not in tasks:
                    continue
                left = None if deadline is None else deadline - time.perf_counter()
                units_left = None if self.budget is None else self.budget - (resource_count(self.full.solver)
                                                                              - units_at_start)
                if (left is not None and left <= 0) or (units_left is not None and units_left <= 0):
                    break
                level, split = task
                share = 1.0 if split is None and level == full else 0.25
                units: int | None = min(int(FIRST_SLICE_UNITS * share) << attempt, MAX_SLICE_UNITS)
                if len(tasks) == 1:
                    units = None  # alone: no reason to cut the run short
                if units_left is not None:
                    units = units_left if units is None else min(units, units_left)
                outcome = self._encoding(level).solve(max_rounds, left, seed=attempt, split=split, units=units)
                if outcome.status == SAT:
                    return _with_seconds(outcome, time.perf_counter() - start)
                if outcome.status != UNSAT:
                    continue
                if split is not None:
                    tasks.remove(task)
                    if level == full:
                        refuted.add(split)
                        if complete and len(refuted) == len(splits):
                            return _with_seconds(outcome, time.perf_counter() - start)
                elif level == full:
                    return _with_seconds(outcome, time.perf_counter() - start)
                else:
                    self._restricted_unsat[level] = max_rounds
                    tasks = [x for x in tasks if x[0] != level]
            if deadline is not None and time.perf_counter() >= deadline:
                break
            if self.budget is not None and resource_count(self.full.solver) - units_at_start >= self.budget:
                break
        return InstanceOutcome(TIMEOUT, self.collective.chunks, self.steps, max_rounds, None,
                               time.perf_counter() - start)


def balanced_splits(rounds: int, caps: Sequence[int], limit: int) -> list[tuple[int, ...]]:
    """Up to `limit` ways to split `rounds` over len(caps) steps (1 <= R_t <= caps[t]), most balanced first
    (smallest largest step), and among those the ones with more rounds in later steps first."""
    steps = len(caps)
    found: list[tuple[int, ...]] = []
    for top in range(max(1, -(-rounds // steps)), max(caps, default=1) + 1):
        level: list[tuple[int, ...]] = []

        def extend(prefix: tuple[int, ...], left: int, top: int = top, level: list = level) -> None:
            t = len(prefix)
            if t == steps:
                if left == 0 and max(prefix) == top:
                    level.append(prefix)
                return
            rest = steps - t - 1
            for r in range(1, min(top, caps[t], left - rest) + 1):
                if left - r <= top * rest:
                    extend(prefix + (r,), left - r)

        extend((), rounds)
        level.sort(key=lambda split: -sum(t * r for t, r in enumerate(split)))
        found += level
        if len(found) >= limit:
            break
    return found[:limit]


def _single_cycle(ranks: Sequence[int]) -> bool:
    seen, r = 0, 0
    while True:
        r = ranks[r]
        seen += 1
        if r == 0:
            return seen == len(ranks)


def _with_seconds(outcome: InstanceOutcome, seconds: float) -> InstanceOutcome:
    return InstanceOutcome(outcome.status, outcome.chunks, outcome.steps, outcome.rounds, outcome.schedule, seconds)


def greedy_schedule(topology: Topology, collective: Collective, steps: int) -> Schedule | None:
    """A quick valid schedule for a non-combining collective in `steps` steps, or None when the steps are too
    few: every chunk spreads along a shortest-path tree from the ranks holding it (a rank d hops away
    receives it in step d-1), each rank joining the tree through a rank already in it if it can, else the
    least loaded link so far. An upper bound on the rounds, and an answer when the solver times out."""
    load: dict[tuple[int, int, int], float] = defaultdict(float)
    per_step: list[list[tuple[int, int, int]]] = [[] for _ in range(steps)]
    for c, dests in enumerate(chunk_destinations(collective)):
        if not dests:
            continue
        depth = distances_from(topology, collective.pre[c])
        if max(depth[d] for d in dests) > steps:
            return None
        in_tree = set(collective.pre[c])
        for v in sorted(dests, key=lambda r: (depth[r], r)):
            x = v
            while x not in in_tree:  # walk back to the tree; depth-0 ranks are in it
                d = int(depth[x])
                candidates = [u for u in topology.in_neighbors[x] if depth[u] == d - 1]
                parent = min(candidates, key=lambda u, x=x, d=d: (
                    u not in in_tree, load[(u, x, d - 1)] / topology.bandwidth(u, x), u))
                load[(parent, x, d - 1)] += 1
                per_step[d - 1].append((c, parent, x))
                in_tree.add(x)
                x = parent
    return tuple((tight_rounds(topology, sends), tuple(sorted(sends))) for sends in per_step)


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
    return z3.Implies(guard, z3.AtMost(*flat, max_extra) if flat else z3.BoolVal(True))


# --- AllReduce, directly ------------------------------------------------------------------------

HasFn = Callable[[int, int, int, int], z3.BoolRef]


def _not(x: z3.BoolRef) -> z3.BoolRef:
    # z3.Not(x) without z3's argument coercion: the same term, built faster (AllReduce builds make ~10^5)
    return z3.BoolRef(z3.Z3_mk_not(x.ctx.ref(), x.as_ast()), x.ctx)


def _or(*args: z3.BoolRef) -> z3.BoolRef:
    # z3.Or(*args) of Boolean terms without z3's argument coercion: the same term, built faster
    array = (z3.Ast * len(args))(*[x.as_ast() for x in args])
    return z3.BoolRef(z3.Z3_mk_or(args[0].ctx.ref(), len(args), array), args[0].ctx)


def _and(*args: z3.BoolRef) -> z3.BoolRef:
    # z3.And(*args) of Boolean terms without z3's argument coercion: the same term, built faster
    array = (z3.Ast * len(args))(*[x.as_ast() for x in args])
    return z3.BoolRef(z3.Z3_mk_and(args[0].ctx.ref(), len(args), array), args[0].ctx)


def copy_or_reduce(cp: dict[SendKey, z3.BoolRef], rd: dict[SendKey, z3.BoolRef],
                   keys: Sequence[SendKey]) -> list[z3.BoolRef]:
    # not (cp[c,u,v,t] and rd[c,u,v,t]): a send is a copy or a reduction
    return [_or(_not(cp[k]), _not(rd[k])) for k in keys]


def single_copy_in(cp: dict[SendKey, z3.BoolRef], rd: dict[SendKey, z3.BoolRef], senders: dict[int, Sequence[int]],
                   pairs: Sequence[tuple[int, int, int]]) -> list[z3.BoolRef]:
    # sum_u cp[c,u,v,t] <= 1 and cp[c,u,v,t] -> not rd[c,w,v,t] for all w
    constraints = []
    for c, v, t in pairs:
        copies = [cp[(c, u, v, t)] for u in senders[v]]
        if len(copies) > 1:
            constraints.append(z3.AtMost(*copies, 1))
        no_reduction = [_not(rd[(c, w, v, t)]) for w in senders[v]]
        for u in senders[v]:
            no_copy = _not(cp[(c, u, v, t)])
            constraints += [_or(no_copy, x) for x in no_reduction]
    return constraints


def no_double_count(rd: dict[SendKey, z3.BoolRef], has: HasFn, senders: dict[int, Sequence[int]],
                    pairs: Sequence[tuple[int, int, int]], ranks: int) -> list[z3.BoolRef]:
    # rd[c,u,v,t] -> not (has[c,u,t,j] and has[c,v,t,j])
    # rd[c,u,v,t] and rd[c,w,v,t] -> not (has[c,u,t,j] and has[c,w,t,j])
    clauses = []
    for c, v, t in pairs:
        no_rd = {u: _not(rd[(c, u, v, t)]) for u in senders[v]}
        lacks = {(u, j): _not(has(c, u, t, j)) for u in (v, *senders[v]) for j in range(ranks)}
        for i, u in enumerate(senders[v]):
            for j in range(ranks):
                clauses.append(_or(no_rd[u], lacks[(u, j)], lacks[(v, j)]))
                clauses += [_or(no_rd[u], no_rd[w], lacks[(u, j)], lacks[(w, j)]) for w in senders[v][i + 1:]]
    return clauses


def contributions_flow(cp: dict[SendKey, z3.BoolRef], rd: dict[SendKey, z3.BoolRef], has: HasFn,
                       senders: dict[int, Sequence[int]],
                       keys: Sequence[tuple[int, int, int, int]]) -> list[z3.BoolRef]:
    # has[c,v,t+1,j] = (has[c,v,t,j] and no copy into v) or OR_u ((cp or rd)[c,u,v,t] and has[c,u,t,j])
    constraints = []
    not_copied: dict[tuple[int, int, int], z3.BoolRef] = {}  # the same terms for every j: built once
    sent: dict[SendKey, z3.BoolRef] = {}
    for c, v, step, j in keys:
        t = step - 1
        if (c, v, t) not in not_copied:
            copied = _or(*[cp[(c, u, v, t)] for u in senders[v]]) if senders[v] else z3.BoolVal(False)
            not_copied[(c, v, t)] = _not(copied)
            sent.update({(c, u, v, t): _or(cp[(c, u, v, t)], rd[(c, u, v, t)]) for u in senders[v]})
        arriving = [_and(sent[(c, u, v, t)], has(c, u, t, j)) for u in senders[v]]
        constraints.append(has(c, v, step, j) == _or(_and(has(c, v, t, j), not_copied[(c, v, t)]), *arriving))
    return constraints


def allreduce_postcondition(has: HasFn, num_chunks: int, ranks: int, steps: int) -> list[z3.BoolRef]:
    # has[c,r,S,j] for every chunk, rank and contribution
    return [has(c, r, steps, j) for c in range(num_chunks) for r in range(ranks) for j in range(ranks)]
