"""Topologies: the model, built-ins by name, JSON I/O (DESIGN.md, "Topology")."""

from collsynth.topologies.library import builtin, dgx1, fully_connected, line, ring
from collsynth.topologies.model import Link, Switch, Topology, TopologyError, links_from_matrix


def resolve_topology(spec: str) -> Topology:
    """A built-in name (`ring:8`) or a path to a JSON file (ours or a TACCL profile)."""
    return builtin(spec)


__all__ = [
    "Link", "Switch", "Topology", "TopologyError", "builtin", "dgx1", "fully_connected", "line",
    "links_from_matrix", "resolve_topology", "ring",
]
