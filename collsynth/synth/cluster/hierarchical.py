"""`hierarchical(topology, collective, size)`: AllReduce on N identical nodes, composed (issue 10, item 3).

In the spirit of BlueConnect / MSCCL++'s 2PH, but every phase is a time-expanded greedy schedule of the
phase's own sub-topology, run once and replicated (nodes are identical; rails use disjoint NICs):
  1. intra-node ReduceScatter: GPU (m, g) sums, over node m, the chunks c with c mod G = g;
  2. inter-node AllReduce of those chunks over rail g = the GPUs (*, g) and the links between them;
  3. intra-node AllGather of the chunks from their owner to the whole node.
Phases follow each other in time (each starts at the previous one's makespan). Ranks are grouped by
`topology.nodes`; every node must have the same number of GPUs and the same links.
"""

from __future__ import annotations

import time
from dataclasses import replace

from collsynth.collectives import Collective, make_collective
from collsynth.core.enums import Op, Status
from collsynth.schedule import COPY, REDUCE, Algorithm, Send, Step, SynthesisResult, verify
from collsynth.synth.cluster.greedy import _reverse, chunk_megabytes
from collsynth.synth.cluster.timexp import GreedyError, Transfers, run_greedy
from collsynth.topologies import Switch, Topology
from collsynth.topologies.symmetry import reversed_topology


def _groups(topology: Topology) -> list[list[int]]:
    if topology.nodes is None or topology.num_nodes < 2:
        raise GreedyError(f"hierarchical: {topology.name} is one node; use `synth greedy` or `synth trees`")
    nodes: dict[int, list[int]] = {}
    for rank, node in enumerate(topology.nodes):
        nodes.setdefault(node, []).append(rank)
    groups = [sorted(nodes[k]) for k in sorted(nodes)]
    if len({len(g) for g in groups}) != 1:
        raise GreedyError(f"hierarchical: the nodes of {topology.name} have different GPU counts")
    if any(len(nic) > 1 for nic in topology.nics):
        raise GreedyError(f"hierarchical: GPUs of {topology.name} share NICs, so rails are not independent; "
                          "use `synth greedy`")
    return groups


def _sub_topology(topology: Topology, ranks: list[int], name: str) -> Topology:
    """The links among `ranks` (renumbered 0..k-1) and the switch budgets restricted to them."""
    local = {r: i for i, r in enumerate(ranks)}
    links = tuple(replace(x, src=local[x.src], dst=local[x.dst]) for x in topology.links
                  if x.src in local and x.dst in local)
    switches = []
    for s in topology.switches:
        inside = frozenset((local[a], local[b]) for a, b in s.links if a in local and b in local)
        if inside:
            switches.append(Switch(s.name, inside, s.bandwidth, s.beta_us_per_mb))
    return Topology(name, len(ranks), links, tuple(switches))


def _placed(transfers: Transfers, ranks: list[int], chunk_of: list[int], op: Op, offset: float) -> list[Send]:
    return [Send(chunk_of[c], ranks[s], ranks[d], op, t + offset, dur) for c, s, d, t, dur in
            zip(transfers.chunk.tolist(), transfers.src.tolist(), transfers.dst.tolist(), transfers.start_us.tolist(),
                transfers.duration_us.tolist(), strict=True)]


def _phases(topology: Topology, groups: list[list[int]], chunks: int, chunk_mb: float,
            seed: int) -> tuple[list[Send], float]:
    nodes, gpus = len(groups), len(groups[0])
    per_owner = nodes * chunks  # chunks c with c mod gpus = g
    node_topo = _sub_topology(topology, groups[0], f"{topology.name}.node")
    # node AllGather (dual of the intra-node ReduceScatter): local chunk g*per_owner + k <-> global k*gpus + g
    node_ag = make_collective("allgather", gpus, per_owner)
    dual = run_greedy(reversed_topology(node_topo), node_ag, chunk_mb, seed=seed)
    rs = _reverse(dual)
    local_to_global = [(c % per_owner) * gpus + c // per_owner for c in range(node_ag.num_chunks)]
    sends: list[Send] = []
    for group in groups:
        sends += _placed(rs, group, local_to_global, REDUCE, 0.0)
    t1 = rs.makespan_us
    rail_topo = _sub_topology(topology, [group[0] for group in groups], f"{topology.name}.rail")
    rail_rs = _reverse(run_greedy(reversed_topology(rail_topo), make_collective("allgather", nodes, chunks), chunk_mb,
                                  seed=seed))
    rail_ag = run_greedy(rail_topo, make_collective("allgather", nodes, chunks), chunk_mb, seed=seed)
    for g in range(gpus):
        rail = [group[g] for group in groups]
        chunk_of = [k * gpus + g for k in range(per_owner)]
        sends += _placed(rail_rs, rail, chunk_of, REDUCE, t1)
        sends += _placed(rail_ag, rail, chunk_of, COPY, t1 + rail_rs.makespan_us)
    t2 = t1 + rail_rs.makespan_us + rail_ag.makespan_us
    ag = run_greedy(node_topo, node_ag, chunk_mb, seed=seed)
    for group in groups:
        sends += _placed(ag, group, local_to_global, COPY, t2)
    return sends, t2 + ag.makespan_us


def hierarchical(topology: Topology, collective: Collective, size_bytes: int = 1 << 30, *,
                 seed: int = 0) -> SynthesisResult:
    """A verified, timed hierarchical AllReduce (see the module docstring)."""
    if collective.name != "allreduce":
        raise GreedyError(f"hierarchical: composes AllReduce only, not {collective.name!r}; use "
                          "`synth greedy` for the others")
    began = time.perf_counter()
    groups = _groups(topology)
    sends, makespan = _phases(topology, groups, collective.chunks, chunk_megabytes(collective, size_bytes), seed)
    by_start: dict[float, list[Send]] = {}
    for send in sends:
        by_start.setdefault(round(send.start_us or 0.0, 6), []).append(send)
    steps = tuple(Step(1, tuple(by_start[t])) for t in sorted(by_start))
    provenance = {"synthesizer": "hierarchical", "size_bytes": size_bytes, "seed": seed, "makespan_us": makespan,
                  "phases": ["intra-node reducescatter", "rail allreduce", "intra-node allgather"]}
    algorithm = Algorithm(f"hier-{collective.name}-{topology.name}", topology, collective, steps, provenance)
    verify(algorithm)
    return SynthesisResult(Status.SAT, (algorithm,), None, "time_us", "hierarchical", time.perf_counter() - began,
                           provenance)
