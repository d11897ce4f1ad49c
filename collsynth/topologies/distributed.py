"""MSCCLang's distributed topologies (`msccl.topologies.distributed`): `num_copies` copies of a one-node topology
with every GPU linked to every GPU of the other copies.

- `distributed_fully_connected(local, num_copies, remote_bw)`: each cross-copy link carries `remote_bw` chunks
  per round on its own.
- `distributed_hub_and_spoke(local, num_copies, remote_bw)`: the same links, but all traffic leaving one copy
  shares one budget of `remote_bw` and all traffic entering it another (one uplink per node).

Cross-copy links take the inter-node link class of collsynth's library (IB EDR alpha-beta costs).
"""

from __future__ import annotations

from collsynth.topologies.library import IB_EDR
from collsynth.topologies.model import Link, Switch, Topology, TopologyError


def _copies(local: Topology, num_copies: int, remote_bw: int) -> tuple[list[Link], list[Switch], int]:
    if num_copies < 1 or remote_bw < 1:
        raise TopologyError(f"distributed topology of {local.name!r}: num_copies ({num_copies}) and remote_bw "
                            f"({remote_bw}) must be >= 1")
    g = local.num_ranks
    total = g * num_copies
    links: list[Link] = []
    switches: list[Switch] = []
    for k in range(num_copies):
        base = k * g
        links += [Link(base + x.src, base + x.dst, x.bandwidth, x.alpha_us, x.beta_us_per_mb, x.kind)
                  for x in local.link_list]
    # MSCCLang's order (sccl/topologies/distributed.py): per local switch, its copies
    switches += [Switch(f"copy_{k}_{s.name}_local", frozenset((k * g + a, k * g + b) for a, b in s.links),
                        s.bandwidth, s.beta_us_per_mb) for s in local.switches for k in range(num_copies)]
    for src in range(total):
        for dst in range(total):
            if src // g != dst // g:
                links.append(IB_EDR.link(src, dst, remote_bw))
    return links, switches, total


def distributed_fully_connected(local_topology: Topology, num_copies: int, remote_bw: int) -> Topology:
    links, switches, total = _copies(local_topology, num_copies, remote_bw)
    g = local_topology.num_ranks
    return Topology(f"DistributedFullyConnected(local={local_topology.name},copies={num_copies},bw={remote_bw})",
                    total, tuple(links), tuple(switches), machines=tuple(r // g for r in range(total)))


def distributed_hub_and_spoke(local_topology: Topology, num_copies: int, remote_bw: int) -> Topology:
    links, switches, total = _copies(local_topology, num_copies, remote_bw)
    g = local_topology.num_ranks
    beta = IB_EDR.beta_us_per_mb
    for k in range(num_copies):
        local = range(k * g, (k + 1) * g)
        remote = [r for r in range(total) if r // g != k]
        switches.append(Switch(f"copy_{k}_out_remote", frozenset((a, b) for a in local for b in remote), remote_bw,
                               beta))
        switches.append(Switch(f"copy_{k}_in_remote", frozenset((b, a) for a in local for b in remote), remote_bw,
                               beta))
    return Topology(f"DistributedHubAndSpoke(local={local_topology.name},copies={num_copies},bw={remote_bw})",
                    total, tuple(links), tuple(switches), machines=tuple(r // g for r in range(total)))


__all__ = ["distributed_fully_connected", "distributed_hub_and_spoke"]
