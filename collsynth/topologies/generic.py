"""MSCCLang's `msccl.topologies.generic`, for programs that import it by that path: `fully_connected(n)`,
`ring(n)`, `line(n)`, `star(n, non_blocking=True)`, `hub_and_spoke(n)`.

The topologies are collsynth's builders' (library.py); their names and switch names are MSCCLang's
(msccl/topologies/generic.py), since a program can read them: `FullyConnected(n=4)`, `Ring(n=4)`, `Line(n=4)`,
`Star(n=4)` (switches `to_points`, `from_points`), `HubAndSpoke(n=4)` (switches `node_<r>_out`, `node_<r>_in`).
The builders exported by `collsynth.topologies` itself keep collsynth's names (`fully_connected:4`, ...), which
`resolve_topology` reads back and the other stages use.
"""

from __future__ import annotations

from dataclasses import replace

from collsynth.topologies import library
from collsynth.topologies.model import Topology


def mscclang_named(topology: Topology, name: str, switch_names: dict[str, str] | None = None) -> Topology:
    """`topology` under MSCCLang's name, its switches renamed by `switch_names` (collsynth's -> MSCCLang's)."""
    renamed = switch_names or {}
    return replace(topology, name=name,
                   switches=tuple(replace(s, name=renamed.get(s.name, s.name)) for s in topology.switches))


def fully_connected(num_nodes: int) -> Topology:
    return mscclang_named(library.fully_connected(num_nodes), f"FullyConnected(n={num_nodes})")


def ring(num_nodes: int) -> Topology:
    return mscclang_named(library.ring(num_nodes), f"Ring(n={num_nodes})")


def line(num_nodes: int) -> Topology:
    return mscclang_named(library.line(num_nodes), f"Line(n={num_nodes})")


def star(num_nodes: int, non_blocking: bool = True) -> Topology:
    return mscclang_named(library.star(num_nodes, non_blocking), f"Star(n={num_nodes})",
                          {"hub_out": "to_points", "hub_in": "from_points"})


def hub_and_spoke(num_nodes: int) -> Topology:
    ports = {f"port_{way}_{r}": f"node_{r}_{way}" for r in range(num_nodes) for way in ("out", "in")}
    return mscclang_named(library.hub_and_spoke(num_nodes), f"HubAndSpoke(n={num_nodes})", ports)


__all__ = ["fully_connected", "hub_and_spoke", "line", "ring", "star"]
