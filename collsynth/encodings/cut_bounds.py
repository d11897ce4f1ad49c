"""Cut lower bounds on rounds per chunk that cost one pass over the ranks: for instances whose flow LP
(`collsynth.encodings.bounds`) is too large to solve in seconds.

Ingress: every chunk a rank must receive crosses one of its in-links at least once, and its in-links carry
at most the sum of their bandwidths per round; egress: every chunk (contribution) a rank alone holds and
another rank needs leaves through its out-links at least once. Switch budgets are ignored (the bound stays
valid, only weaker)."""

from __future__ import annotations

from fractions import Fraction

from collsynth.collectives import Collective
from collsynth.topologies import Topology


def cut_bound_rounds_per_chunk(topology: Topology, collective: Collective) -> Fraction:
    """max over ranks of (chunks in / in-bandwidth, chunks out / out-bandwidth), per chunk of the collective."""
    n = topology.num_ranks
    bw_in, bw_out = [0] * n, [0] * n
    for link in topology.links:
        bw_in[link.dst] += link.bandwidth
        bw_out[link.src] += link.bandwidth
    need_in, need_out = [0] * n, [0] * n
    for pre, post in zip(collective.pre, collective.post, strict=True):
        if collective.combining:
            # rank v in post(c) receives chunk c at least once unless it holds every contribution itself;
            # rank u in pre(c) sends its contribution at least once unless only u needs the result
            receivers = [v for v in post if pre - {v}]
            senders = [u for u in pre if post - {u}]
        else:
            # rank v in post(c) \ pre(c) receives chunk c; a sole holder u sends it at least once
            receivers = list(post - pre)
            senders = list(pre) if len(pre) == 1 and receivers else []
        for v in receivers:
            need_in[v] += 1
        for u in senders:
            need_out[u] += 1
    worst = Fraction(0)
    for r in range(n):
        for need, bandwidth in ((need_in[r], bw_in[r]), (need_out[r], bw_out[r])):
            if need and bandwidth:
                worst = max(worst, Fraction(need, bandwidth))
    return worst / collective.chunks
