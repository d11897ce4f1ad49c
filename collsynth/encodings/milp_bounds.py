"""Combinatorial lower bounds on every schedule a sketch allows, for what the routing MILP cannot see.

The routing MILP (`taccl_milp.py`) bounds the makespan by path lengths and by link/budget loads, but it
does not know in which order chunks cross a shared NIC: it lets every chunk arrive at its shortest-path
time. On multi-node instances the true limit is often "the NIC drains one transfer at a time, and the
chunks that come through it last must still spread inside the node". The bound families here capture
that, each from a short argument given in its docstring; `sketch_lower_bounds` returns all of them and
the pipeline reports the largest together with the routing MILP's bound.

Terms (node N; a chunk is *remote* for N when it has a target in N and no source in N, so it must
cross into N at least once over an *entry* arc (u, v), u outside N, v in N):
- an entry *budget* B is a set of entry arcs that carry one transfer at a time (the largest topology
  switch/NIC that contains the arc, else the arc alone); a transfer of k chunks on arc a holds B for
  at least alpha_B + k beta_B (the smallest alpha and beta on B), k <= K (the sketch's max_together on
  groupable links, else 1), and every chunk of a transfer must be at the sender before it starts;
- head(c, a): the shortest time (no contention) for chunk c to reach a's source;
- push(B, n): the earliest that B can have finished carrying n chunks (`_push_time`);
- spread(c, v): the least time for c, held in N by v alone, to reach all of its targets in N without
  crossing into N again (`_spread_time`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from collsynth.encodings.milp_instance import Arc, RoutingInstance, arc_adjacency, shortest_times

INF = math.inf


@dataclass(frozen=True)
class Bound:
    family: str
    value: float
    note: str = ""

    def __str__(self) -> str:
        return f"{self.family} {self.value:.3f} us" + (f" ({self.note})" if self.note else "")


def _never() -> bool:
    return False


def sketch_lower_bounds(inst: RoutingInstance, stop: Callable[[], bool] = _never) -> tuple[Bound, ...]:
    """Every bound family below for every node, strongest first (empty on a one-node instance). `stop()` is
    asked before every node after the first: each bound holds alone, so the nodes done so far still bound."""
    if inst.sketch.num_nodes < 2:
        return ()
    heads = chunk_heads(inst)
    found: list[Bound] = []
    for node in range(inst.sketch.num_nodes):
        if node and stop():
            break
        budgets = _entry_budgets(inst, node)
        if not budgets:
            continue
        found += _drain_then_spread(inst, node, heads)
        found += _last_group_spreads(inst, node, heads)
        remote = _remote_chunks(inst, node)
        if not remote:
            continue
        entries = _entry_times(inst, budgets, heads, remote)
        found += _late_entries_through_in_port(inst, node, remote, entries)
        found += _late_entries_behind_one_budget(inst, node, budgets, remote, entries)
    return tuple(sorted(found, key=lambda b: (-b.value, b.family, b.note)))


def best_sketch_bound(inst: RoutingInstance, stop: Callable[[], bool] = _never) -> Bound | None:
    bounds = sketch_lower_bounds(inst, stop)
    return bounds[0] if bounds else None


# --- ingredients ---------------------------------------------------------------------------------

def chunk_heads(inst: RoutingInstance) -> dict[tuple[int, Arc], float]:
    """head(c, a) for every link a chunk may use: its shortest time (no contention) to the link's source."""
    heads: dict[tuple[int, Arc], float] = {}
    for c, ch in enumerate(inst.chunks):
        dist = _shortest_times(inst, c, ch.sources)
        for a in ch.arcs:
            heads[(c, a)] = dist.get(a[0], INF)
    return heads


def _shortest_times(inst: RoutingInstance, c: int, starts: Iterable[int],
                    within: int | None = None) -> dict[int, float]:
    """Dijkstra over chunk c's links (only links inside node `within` when given)."""
    arcs = [a for a in inst.chunks[c].arcs
            if within is None or (inst.node_of(a[0]) == within and inst.node_of(a[1]) == within)]
    return shortest_times(arc_adjacency(arcs, inst.link_cost), starts)


def _forced_through_budgets(inst: RoutingInstance, node: int) -> list[tuple[str, frozenset[Arc], list[int]]]:
    """(name, budget B, F) for each entry budget of `node` with F non-empty: the remote chunks of the node
    whose every entry arc lies in B (they must cross B)."""
    remote = _remote_chunks(inst, node)
    out = []
    for name, budget in sorted(_all_entry_budgets(inst, node).items()):
        forced = [c for c in remote
                  if all(a in budget for a in inst.chunks[c].arcs
                         if inst.node_of(a[1]) == node and inst.node_of(a[0]) != node)]
        if forced:
            out.append((name, budget, forced))
    return out


def _remote_chunks(inst: RoutingInstance, node: int) -> list[int]:
    return [c for c, ch in enumerate(inst.chunks)
            if any(inst.node_of(d) == node for d in ch.targets) and all(inst.node_of(s) != node for s in ch.sources)]


def _entry_budgets(inst: RoutingInstance, node: int) -> dict[str, frozenset[Arc]]:
    """Entry arcs into `node` that some chunk may use, partitioned by the largest budget containing each
    (a subset of a one-transfer-at-a-time budget is itself one transfer at a time)."""
    used = {a for ch in inst.chunks for a in ch.arcs if inst.node_of(a[1]) == node and inst.node_of(a[0]) != node}
    parts: dict[str, set[Arc]] = {}
    for a in sorted(used):
        owners = [inst.resources[r] for r in inst.resources_of.get(a, ())]
        if owners:
            best = max(owners, key=lambda res: (len(res.links), res.name))
            parts.setdefault(best.name, set()).add(a)
        else:
            parts.setdefault(f"link {a[0]}->{a[1]}", set()).add(a)
    return {name: frozenset(arcs) for name, arcs in parts.items()}


def _all_entry_budgets(inst: RoutingInstance, node: int) -> dict[str, frozenset[Arc]]:
    """Every one-transfer-at-a-time set of entry arcs into `node`: each budget's entry arcs, and each
    entry arc in no budget on its own (overlapping; for bounds that look at one budget at a time)."""
    used = {a for ch in inst.chunks for a in ch.arcs if inst.node_of(a[1]) == node and inst.node_of(a[0]) != node}
    out: dict[str, frozenset[Arc]] = {}
    for res in inst.resources:
        arcs = frozenset(a for a in res.links if a in used)
        if arcs:
            out[res.name] = arcs
    for a in sorted(used):
        if a not in inst.resources_of:
            out[f"link {a[0]}->{a[1]}"] = frozenset((a,))
    return out


def _push_time(inst: RoutingInstance, budget: frozenset[Arc], heads: Mapping[tuple[int, Arc], float],
               n: int) -> float:
    # push(B, n) = min over G in [ceil(n/K), n] of G alpha + n beta + S(max(1, n - K (G - 1)))
    """The earliest budget B can have finished carrying n chunks, whatever transfers they form.

    Valid: B carries its transfers one after another from the start S of its first transfer, so it
    finishes the n-th chunk at >= S + G alpha + n beta with G transfers of <= K chunks each. The first
    transfer carries >= n - K (G - 1) chunks, all on one arc a, all at a's source before it starts, so
    S >= S(f) = min over arcs a of B of the f-th smallest head(c, a). Infinite if no arc can carry f."""
    if n <= 0:
        return 0.0
    return _pushes_of(inst, budget, heads)(n)


def _pushes_of(inst: RoutingInstance, budget: frozenset[Arc],
               heads: Mapping[tuple[int, Arc], float]) -> Callable[[int], float]:
    """push(B, .) as a function of n, with B's costs and sorted heads per arc computed once."""
    alpha, beta, per_arc = _push_setup(inst, budget, heads)
    k = max(1, inst.max_together) if any(a in inst.groupable for a in budget) else 1

    def push(n: int) -> float:
        return 0.0 if n <= 0 else _push_from(alpha, beta, per_arc, k, n)
    return push


def _push_setup(inst: RoutingInstance, budget: frozenset[Arc],
                heads: Mapping[tuple[int, Arc], float]) -> tuple[float, float, list[list[float]]]:
    """B's least alpha and beta, and the sorted heads of each of its arcs (the setup of push and last_push)."""
    alpha = min(inst.link_alpha[a] for a in budget)
    beta = min(inst.link_beta[a] for a in budget)
    per_arc = [sorted(heads[(c, a)] for c in range(len(inst.chunks)) if (c, a) in heads) for a in sorted(budget)]
    return alpha, beta, per_arc


def _push_from(alpha: float, beta: float, per_arc: list[list[float]], k: int, n: int) -> float:
    best = INF
    for groups in range(math.ceil(n / k), n + 1):
        first = max(1, n - k * (groups - 1))
        start = min((hs[first - 1] for hs in per_arc if len(hs) >= first), default=INF)
        best = min(best, groups * alpha + n * beta + start)
    return best


def _spread_time(inst: RoutingInstance, c: int, v: int, node: int) -> float:
    # spread(c, v) = max(max_w dist_c(v, w), p_min * ceil(log_{1 + fan}(n_targets + 1)))
    """A lower bound on the time for chunk c, held in `node` by v alone, to reach all its other targets
    there without crossing into the node again (so over links inside the node).

    Valid: each target w needs a path from v, hence at least the shortest path time; and the number of
    holders at most multiplies by (1 + fan) every p_min (every transfer takes >= p_min, a holder
    finishes at most one transfer per p_min on each of its independent channels, and a channel is an
    out-port budget or a link outside any out-port), so reaching n targets takes that many rounds."""
    targets = [d for d in inst.chunks[c].targets if inst.node_of(d) == node and d != v]
    if not targets:
        return 0.0
    dist = _shortest_times(inst, c, (v,), within=node)
    ecc = max(dist.get(d, INF) for d in targets)
    inside = [a for a in inst.chunks[c].arcs if inst.node_of(a[0]) == node and inst.node_of(a[1]) == node]
    if not inside:
        return ecc
    p_min = min(inst.link_cost[a] for a in inside)
    channels: dict[int, set] = {}
    for a in inside:
        ports = [r for r in inst.resources_of.get(a, ()) if inst.resources[r].port == "out"]
        channels.setdefault(a[0], set()).add(("port", ports[0]) if ports else ("link", a))
    fan = max((len(ch) for ch in channels.values()), default=0)
    rounds = 0
    holders = 1
    while holders < len(targets) + 1:
        holders *= 1 + fan
        rounds += 1
    return max(ecc, rounds * p_min)


# --- bound families --------------------------------------------------------------------------------

def _drain_then_spread(inst: RoutingInstance, node: int, heads: Mapping[tuple[int, Arc], float]) -> list[Bound]:
    # T >= min(push(B, |F|) + min_{c in F, a in B} spread(c, a.dst), push(B, |F| + 1))  per entry budget B
    """F = the remote chunks of the node whose every entry arc lies in B (they must cross B).

    Valid: let c be a chunk of B's last transfer, ending at E, arriving at v. If c is in F and crosses
    into the node only once, nobody else in the node holds c at E, so T >= E + spread(c, v) with
    E >= push(B, |F|). Otherwise (c crosses twice, both times over B, or c is not in F) B carries at
    least |F| + 1 chunks, so T >= E >= push(B, |F| + 1)."""
    out = []
    for name, budget, forced in _forced_through_budgets(inst, node):
        tail = min(_spread_time(inst, c, a[1], node) for c in forced for a in inst.chunks[c].arcs if a in budget)
        n = len(forced)
        push = _pushes_of(inst, budget, heads)
        value = min(push(n) + tail, push(n + 1))
        if value < INF:
            out.append(Bound("drain_then_spread", value, f"node {node}, {name}: {n} chunks must cross it"))
    return out


def _last_group_spreads(inst: RoutingInstance, node: int, heads: Mapping[tuple[int, Arc], float]) -> list[Bound]:
    # T >= min(push(B, |F| + 1), min_g [last_push(B, |F|, g) + group_spread(g)])  per entry budget B
    """F as in drain_then_spread; g = the number of chunks in B's last transfer (1..K).

    Valid: if B carries |F| + 1 chunks or more, T >= push(B, |F| + 1). Otherwise B carries exactly the n
    chunks of F, each once, so every chunk of its last transfer (g of them, ending at E) is held in the
    node by the receiver v alone at E and never enters again. E >= last_push(B, n, g): G transfers, the
    last of g chunks and the others of <= K, so G >= 1 + ceil((n - g) / K) and the first carries
    >= n - g - K (G - 2) chunks (g when G = 1). Then each target u of m_u of those chunks gets each of
    them over a path that starts with its own transfer out of v (`_group_spread`)."""
    out = []
    for name, budget, forced in _forced_through_budgets(inst, node):
        n = len(forced)
        k = max(1, inst.max_together) if any(a in inst.groupable for a in budget) else 1
        receivers = sorted({a[1] for c in forced for a in inst.chunks[c].arcs if a in budget})
        best = INF
        for g in range(1, min(k, n) + 1):
            spread = min(_group_spread(inst, forced, v, node, g) for v in receivers)
            best = min(best, _last_push_time(inst, budget, heads, n, g, k) + spread)
        value = min(best, _push_time(inst, budget, heads, n + 1))
        if value < INF:
            out.append(Bound("last_group_spread", value, f"node {node}, {name}: {n} chunks must cross it"))
    return out


def _last_push_time(inst: RoutingInstance, budget: frozenset[Arc], heads: Mapping[tuple[int, Arc], float],
                    n: int, g: int, k: int) -> float:
    # last_push(B, n, g) = min over G >= 1 + ceil((n - g) / K) of G alpha + n beta + S(first(G))
    """The earliest B can finish carrying n chunks when its last transfer carries g of them (as
    `_push_time`, with the first transfer's size forced by the last one's)."""
    alpha, beta, per_arc = _push_setup(inst, budget, heads)
    best = INF
    least = 1 if g == n else 1 + math.ceil((n - g) / k)
    for groups in range(least, n - g + 2):
        first = g if groups == 1 else max(1, n - g - k * (groups - 2))
        start = min((hs[first - 1] for hs in per_arc if len(hs) >= first), default=INF)
        best = min(best, groups * alpha + n * beta + start)
    return best


def group_spread_time(inst: RoutingInstance, chunks: list[int], v: int, node: int) -> float:
    # group_spread_time(G, v) = max(max_{c in G} spread(c, v), group_spread(G, g = |G|))
    """A lower bound on the time for all of `chunks`, held in `node` by v alone (and nobody else there),
    to reach all their targets in the node: each chunk's own spread, and the slots out of v that the
    group needs together (valid by the arguments of `_spread_time` and `_group_spread`)."""
    if not chunks:
        return 0.0
    own = max(_spread_time(inst, c, v, node) for c in chunks)
    return max(own, _group_spread(inst, list(chunks), v, node, len(chunks)))


def _group_spread(inst: RoutingInstance, chunks: list[int], v: int, node: int, g: int) -> float:
    # group_spread(g) = max_u m_u-th smallest of {(j - 1) p_ch + min_x [cost(v, x) + dist(x, u)]: channel ch, j >= 1}
    """A lower bound on the time for any g of `chunks`, held in `node` by v alone, to reach all their
    targets in the node; m_u = g - (chunks without target u), the fewest of the g that target u.

    Valid: each of those chunks reaches u over a path inside the node whose first transfer, out of v,
    carries that chunk alone (links inside a node carry one chunk per transfer); transfers out of v on
    one channel (an out-port budget, else a link) go one at a time, each taking >= p_ch, so the j-th
    starts >= (j - 1) p_ch after the chunks arrive; dist is the shortest time over any of the chunks'
    links inside the node. So at least m_u distinct slots must reach u in time."""
    inside = {a for c in chunks for a in inst.chunks[c].arcs
              if inst.node_of(a[0]) == node and inst.node_of(a[1]) == node}
    if inside & inst.groupable:
        return 0.0  # a transfer inside the node could carry several chunks: no slot argument
    out_of_v = sorted(a for a in inside if a[0] == v)
    channels: dict[object, list[Arc]] = {}
    for a in out_of_v:
        ports = [r for r in inst.resources_of.get(a, ()) if inst.resources[r].port == "out"]
        channels.setdefault(("port", ports[0]) if ports else ("link", a), []).append(a)
    adjacency = arc_adjacency(inside, inst.link_cost)
    targets = sorted({u for c in chunks for u in inst.chunks[c].targets if inst.node_of(u) == node and u != v})
    dist = {x: shortest_times(adjacency, (x,)) for x in sorted({a[1] for a in out_of_v})}
    worst = 0.0
    for u in targets:
        need = g - sum(1 for c in chunks if u not in inst.chunks[c].targets)
        if need <= 0:
            continue
        slots: list[float] = []
        for arcs in channels.values():
            period = min(inst.link_cost[a] for a in arcs)
            first = min(inst.link_cost[a] + dist[a[1]].get(u, INF) for a in arcs)
            if first < INF:
                slots += [first + j * period for j in range(need)]
        slots.sort()
        worst = max(worst, slots[need - 1] if len(slots) >= need else INF)
    return worst


def _entry_times(inst: RoutingInstance, budgets: Mapping[str, frozenset[Arc]],
                 heads: Mapping[tuple[int, Arc], float], remote: list[int]) -> list[float]:
    """e_1 <= e_2 <= ...: the k-th remote chunk to enter the node (first entry) does so at >= e_k.

    Valid: the j-th first entry over budget B is carried by a transfer that completes B's j-th (or a
    later) chunk, so it is at >= push(B, j); B carries first entries of at most the remote chunks that
    can use it; merging the budgets' sequences and sorting gives a lower bound on every ordering."""
    times: list[float] = []
    for budget in budgets.values():
        capacity = sum(1 for c in remote if any(a in budget for a in inst.chunks[c].arcs))
        push = _pushes_of(inst, budget, heads)
        times += [push(j) for j in range(1, capacity + 1)]
    return sorted(times)[:len(remote)]


def _late_entries_through_in_port(inst: RoutingInstance, node: int, remote: list[int],
                                  entries: list[float]) -> list[Bound]:
    # T >= e_k + p_in (R_w - (k - 1) - q_w)  for each rank w of the node with an in-port, k = 1..R
    """R_w: remote chunks with target w; q_w: those with an entry arc into w itself; p_in: the least
    cost of w's in-port, the one-at-a-time budget holding every link inside the node into w.

    Valid: the remote chunks whose first entry is k-th or later all enter at >= e_k; at least
    R_w - (k - 1) of them target w; at most q_w of those reach w over an entry arc, the others come
    through the in-port after entering, one at a time, each taking >= p_in. (`entries`: `_entry_times`.)"""
    out = []
    for w, p_in in sorted(_in_port_costs(inst, node).items()):
        mine = [c for c in remote if w in inst.chunks[c].targets]
        direct = sum(1 for c in mine if any(a[1] == w and inst.node_of(a[0]) != node for a in inst.chunks[c].arcs))
        best, at = -INF, 0
        for k, e in enumerate(entries, start=1):
            late = len(mine) - (k - 1) - direct
            if late <= 0:
                break
            if e + p_in * late > best:
                best, at = e + p_in * late, k
        if best > 0:
            out.append(Bound("late_entries_through_in_port", best,
                             f"node {node}, rank {w}: chunks entering {at}th or later"))
    return out


def _in_port_costs(inst: RoutingInstance, node: int) -> dict[int, float]:
    """Ranks of the node whose links from inside the node all lie in one in-port budget -> its least cost."""
    out = {}
    for res in inst.resources:
        w = res.rank
        if res.port != "in" or w is None or inst.node_of(w) != node:
            continue
        inside = {a for ch in inst.chunks for a in ch.arcs if a[1] == w and inst.node_of(a[0]) == node}
        if inside and inside <= res.links:
            out[w] = min(inst.link_cost[a] for a in inside)
    return out


def _late_entries_behind_one_budget(inst: RoutingInstance, node: int, budgets: Mapping[str, frozenset[Arc]],
                                    remote: list[int], entries: list[float]) -> list[Bound]:
    # T >= e_k + min(second(B), p_in ceil((sum_{w in S} (R_w - k + 1) - 1) / |S|))  for S = ranks B enters
    """S: the ranks that B's arcs enter, when every entry arc into them is in B and each has an in-port;
    second(B): the least time between two completions on B (0 if two chunks may share a transfer).

    Valid: if B completes two chunks at >= e_k, the later one is at >= e_k + second(B). Otherwise at most
    one chunk entering at >= e_k reaches S directly, so the ranks of S together receive at least
    sum_w (R_w - k + 1) - 1 late chunks through their in-ports (as in late_entries_through_in_port),
    and the busiest in-port takes at least the average, one at a time after e_k."""
    ports = _in_port_costs(inst, node)
    entering: dict[int, set[Arc]] = {}
    for ch in inst.chunks:
        for a in ch.arcs:
            if inst.node_of(a[1]) == node and inst.node_of(a[0]) != node:
                entering.setdefault(a[1], set()).add(a)
    out = []
    for name, budget in sorted(budgets.items()):
        ranks = sorted({a[1] for a in budget})
        if len(ranks) < 2 or any(w not in ports or not entering[w] <= budget for w in ranks):
            continue
        shared = any(a in inst.groupable and sum(1 for ch in inst.chunks if a in ch.arcs) > 1 for a in budget)
        second = 0.0 if shared and inst.max_together > 1 else min(inst.link_cost[a] for a in budget)
        p_in = min(ports[w] for w in ranks)
        need = {w: sum(1 for c in remote if w in inst.chunks[c].targets) for w in ranks}
        best, at = -INF, 0
        for k, e in enumerate(entries, start=1):
            late = sum(max(0, need[w] - (k - 1)) for w in ranks) - 1
            if late <= 0:
                break
            value = e + min(second, p_in * math.ceil(late / len(ranks)))
            if value > best:
                best, at = value, k
        if best > 0:
            out.append(Bound("late_entries_behind_one_budget", best,
                             f"node {node}, ranks {ranks} behind {name}: chunks entering {at}th or later"))
    return out
