"""The gateway AllToAll of the hierarchical composition: few, large inter-node messages (for small sizes).

The rail exchange of the node-rail / rail-node plans sends N-1 messages through every NIC (one per remote
node); at small sizes those alphas dominate. Here every ordered node pair (m, m') has one gateway GPU on
each side, and the other nodes take a node's GPUs round-robin, so a NIC carries about (N-1)/G messages:
1. every GPU of node m hands the gateway for m' what it sends to node m' (and delivers inside its node);
2. one bulk transfer per node pair, gateway to gateway (any GPU to any GPU: the NICs share one fabric);
3. the receiving gateway hands each GPU of m' its blocks.
The three steps are one phase each; the result is a verified step-based `Algorithm`. Lowered with
`merge="stage"` the bulk is one message (its pieces are gathered into scratch locally first);
`algorithms.hier_lower.lower_gateway` makes every transfer one message.

Two ways to pick the gateways (`ASSIGNMENTS`):
- "round-robin": the other nodes take a node's GPUs in turn, on each side (the library's three-step);
- "rail": the pair (m, m + h) uses GPU (h - 1) mod G on both sides, so the sending and the receiving NIC are on
  one rail. A GPU's j-th bulk then goes to hop h = g + 1 + j*G, and in every round j the bulks of a rail form a
  permutation of its NICs: no two senders of a round share a receiving NIC. With NICs that are busy from both
  ends of a transfer, the round-robin pairs collide and queue where the rail rounds do not.
"""

from __future__ import annotations

from collsynth.collectives import Collective
from collsynth.schedule import Algorithm, Send, Step, verify
from collsynth.synth.cluster.hier_phases import min_rounds
from collsynth.synth.cluster.hier_plans import Groups
from collsynth.topologies import Topology

ASSIGNMENTS = ("round-robin", "rail")


def gateway(groups: Groups, node: int, remote: int) -> int:
    """The GPU of `node` that carries its traffic with `remote`: the other nodes take its GPUs in turn."""
    slot = remote if remote < node else remote - 1
    return groups[node][slot % len(groups[node])]


def gateways(groups: Groups, node: int, remote: int, assignment: str = "round-robin") -> tuple[int, int]:
    """(sending gateway on `node`, receiving gateway on `remote`) of the bulk node -> remote."""
    if assignment == "rail":
        g = ((remote - node) % len(groups) - 1) % len(groups[node])
        return groups[node][g], groups[remote][g]
    return gateway(groups, node, remote), gateway(groups, remote, node)


def gateway_alltoall(topology: Topology, collective: Collective, groups: Groups, name: str,
                     assignment: str = "round-robin") -> Algorithm | None:
    """The three-step gateway AllToAll (module docstring), or None where a link it needs is missing."""
    n, c = collective.num_ranks, collective.chunks

    def chunks(s: int, d: int) -> range:  # what rank s sends rank d
        return range((s * n + d) * c, (s * n + d + 1) * c)

    gather: list[Send] = []
    bulk: list[Send] = []
    scatter: list[Send] = []
    for m, node in enumerate(groups):
        gather += [Send(x, s, d) for s in node for d in node if d != s for x in chunks(s, d)]
        for r, other in enumerate(groups):
            if r == m:
                continue
            out, into = gateways(groups, m, r, assignment)
            # destination-major, so that what one destination gets is contiguous at the gateway
            gather += [Send(x, s, out) for d in other for s in node if s != out for x in chunks(s, d)]
            bulk += [Send(x, out, into) for d in other for s in node for x in chunks(s, d)]
            scatter += [Send(x, into, d) for d in other if d != into for s in node for x in chunks(s, d)]
    steps = [gather, bulk, scatter]
    if any(not topology.has_link(s.src, s.dst) for step in steps for s in step):
        return None
    algorithm = Algorithm(name, topology, collective, tuple(Step(min_rounds(topology, s), tuple(s)) for s in steps))
    verify(algorithm)
    return algorithm
