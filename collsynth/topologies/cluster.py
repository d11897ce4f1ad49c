"""Cluster-scale additions to the built-ins: the `fattree:K` fabric and uniform link costs.

`TACOS_LINK` is the setting the TACOS paper evaluates tori and meshes with (50 GB/s and 0.5 us per link);
the built-in torus and mesh keep their V100 NVLink costs, and `relinked(topology, TACOS_LINK)` gives the
same shape with TACOS's costs (what bench/scale.py measures).

`fattree:K` is a K-ary two-level fat-tree (folded Clos) seen from its end points: K^2/2 ranks, K/2 per leaf
switch, K leaf and K/2 spine switches (full bisection). Switches are not ranks in collsynth's model, so
each rank has a link to every other rank and the fabric appears as budgets: one per rank and direction
(its port into the leaf), and one per leaf and direction over its uplinks to the spine (K/2 lanes, one
per uplink; it carries every transfer that leaves or enters the leaf).
"""

from __future__ import annotations

from dataclasses import replace

from collsynth.topologies.model import Link, Switch, Topology, TopologyError


def _beta(gb_per_s: float) -> float:
    return 1000.0 / gb_per_s  # microseconds per MB


def relinked(topology: Topology, alpha_us: float, gb_per_s: float) -> Topology:
    """The same topology with every link (and switch) at `alpha_us` and `gb_per_s` per direction."""
    beta = _beta(gb_per_s)
    links = tuple(replace(x, alpha_us=alpha_us, beta_us_per_mb=beta / x.bandwidth) for x in topology.link_list)
    switches = tuple(replace(s, beta_us_per_mb=beta) for s in topology.switches)
    return replace(topology, name=f"{topology.name}@{gb_per_s:g}GBps", link_list=links, switches=switches)


TACOS_ALPHA_US = 0.5
TACOS_GB_PER_S = 50.0
FATTREE_ALPHA_US = 1.0  # assumed: one switch hop more than a direct NVLink
FATTREE_GB_PER_S = 50.0  # 400 Gb/s ports


def fattree(k: int) -> Topology:
    """Two-level K-ary fat-tree: K^2/2 ranks (see the module docstring)."""
    if k < 2 or k % 2:
        raise TopologyError(f"fattree:{k}: K must be an even number >= 2 (fattree:4 has 8 ranks)")
    half = k // 2
    n = k * half
    beta = _beta(FATTREE_GB_PER_S)
    links = tuple(Link(s, d, 1, FATTREE_ALPHA_US, beta, "ib") for s in range(n) for d in range(n) if s != d)
    switches: list[Switch] = []
    for r in range(n):
        switches.append(Switch(f"port_out_{r}", frozenset((r, d) for d in range(n) if d != r), 1, beta))
        switches.append(Switch(f"port_in_{r}", frozenset((s, r) for s in range(n) if s != r), 1, beta))
    for leaf in range(k):
        inside = set(range(leaf * half, (leaf + 1) * half))
        up = frozenset((s, d) for s in inside for d in range(n) if d not in inside)
        switches.append(Switch(f"leaf{leaf}_up", up, half, beta))
        switches.append(Switch(f"leaf{leaf}_down", frozenset((d, s) for s, d in up), half, beta))
    return Topology(f"fattree:{k}", n, links, tuple(switches), machines=tuple(r // half for r in range(n)),
                    description=f"{k}-ary two-level fat-tree, {n} ranks, {half} per leaf, full bisection")
