"""MSCCLang's topology transformers (`msccl.topologies.transformers`), with MSCCLang's meaning and names:

- `reverse_topology(t)`: every link and switch turned around (`Reverse<name>`; switches get `_reversed`);
- `binarize_topology(t)`: connectivity only: every link bandwidth 1, no switches (`Binarized<name>`).
"""

from __future__ import annotations

from dataclasses import replace

from collsynth.topologies.model import Link, Topology
from collsynth.topologies.symmetry import reversed_topology


def reverse_topology(topology: Topology) -> Topology:
    flipped = reversed_topology(topology)
    return replace(flipped, name=f"Reverse{topology.name}",
                   switches=tuple(replace(s, name=f"{s.name}_reversed") for s in flipped.switches))


def binarize_topology(topology: Topology) -> Topology:
    links = tuple(Link(x.src, x.dst, 1, x.alpha_us, x.beta_us_per_mb, x.kind) for x in topology.link_list)
    return replace(topology, name=f"Binarized{topology.name}", link_list=links, switches=())


__all__ = ["binarize_topology", "reverse_topology"]
