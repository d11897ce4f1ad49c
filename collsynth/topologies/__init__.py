"""Topologies: the model, built-ins by name, JSON I/O, drawing (DESIGN.md, "Topology").

`from collsynth.topologies import *` gives MSCCLang's topology builders (`fully_connected(size)`,
`ring(size)`, `line(size)`, `star(size)`, `hub_and_spoke(size)`, `dgx1()`, `dgx_a100()`, `amd4()`,
`amd8()`, `nvlink_only()`) and transformers (`reverse_topology`, `binarize_topology`), returning our
`Topology`, which also answers MSCCLang's Topology methods (`num_nodes()` = ranks, `nodes()`, `link()` = bandwidth,
`sources`, `destinations`, `bandwidth_constraints`; model.py). MSCCLang's submodules have their namesakes:
`collsynth.topologies.distributed`, `.generic`, `.nvidia`, `.amd`, `.transformers`, `.topology`. The namesake
modules name their topologies and switches as MSCCLang does (`FullyConnected(n=4)`, `DGX1`, `node_0_out`, ...);
the builders exported here keep collsynth's names (`fully_connected:4`, `dgx1`, `port_out_0`), which
`resolve_topology` reads back and every stage uses.

The machine builders are MSCCLang's models, which are not always collsynth's: `dgx_a100()` is MSCCLang's
bandwidth-12 full mesh without switch budgets and `amd8()` its 5/6-link mesh, while the built-ins of those names
(`builtin("dgx_a100")` = `ndv4()`, `builtin("amd8")` = `mi300x()`) are collsynth's models of the machines.
"""

from collsynth.topologies.amd import amd8
from collsynth.topologies.draw import draw_topology
from collsynth.topologies.io import load_topology, resolve_topology, save_topology
from collsynth.topologies.library import (
    BUILTIN_TOPOLOGIES,
    BUILTINS,
    LINK_CLASSES,
    BuiltinTopology,
    LinkClass,
    amd4,
    builtin,
    dgx1,
    dgx2,
    fully_connected,
    h100_nvswitch,
    hub_and_spoke,
    hypercube,
    line,
    mesh2d,
    mi300x,
    multi_node,
    ndv2,
    ndv4,
    nvlink_only,
    ring,
    star,
    torus,
)
from collsynth.topologies.model import Link, Switch, Topology, TopologyError, links_from_matrix
from collsynth.topologies.nvidia import dgx_a100
from collsynth.topologies.transformers import binarize_topology, reverse_topology

__all__ = [
    "BUILTINS", "BUILTIN_TOPOLOGIES", "LINK_CLASSES", "BuiltinTopology", "Link", "LinkClass", "Switch", "Topology",
    "TopologyError", "amd4", "amd8", "builtin", "dgx1", "dgx2", "dgx_a100", "draw_topology", "fully_connected",
    "h100_nvswitch", "hub_and_spoke", "hypercube", "line", "links_from_matrix", "load_topology", "mesh2d", "mi300x",
    "multi_node", "ndv2", "ndv4", "nvlink_only", "resolve_topology", "ring", "save_topology", "star", "torus",
    "binarize_topology", "reverse_topology",
]
