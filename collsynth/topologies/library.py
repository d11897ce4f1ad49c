"""Built-in topologies, by name with parameters (`ring:8`, `dgx1`, `mesh2d:4x4`, `2xndv2`, ...).

Two cost models ride on every link (see model.py): an integer `bandwidth` in chunks per round for the
SMT encoding, and alpha-beta costs for the MILP encoding and the simulator. NVSwitch nodes follow SCCL's
hub-and-spoke model: a link between every pair of GPUs, plus one `Switch` budget per GPU and direction
(its port into the switch fabric carries one chunk per round, whichever peer it goes to).

Alpha-beta figures per link class (`LinkClass` below, documented in docs/formats.md):
- Betas are us per MiB (2^20 B), as the simulator applies them. V100 NVLink2 and InfiniBand EDR are TACCL's
  measured NDv2 profile (0.7 us / 46 us per MiB per NVLink; 2.6 / 105 per EDR NIC); DGX-2's NVSwitch port is
  TACCL's DGX2 profile (8 us per MiB).
- Newer classes scale the vendor's peak (GB/s = 10^9 B/s) by the achieved/peak ratio of the measured class of
  their kind, taken per MiB (NVLink2: 25 GB/s is 41.94 us/MiB vs 46 measured), so a derived beta is the measured
  one times peak_measured / peak_new whatever the byte unit. Alphas of the newer classes are assumptions.

Multi-node composition `NxNAME`: N copies of a node topology; every GPU gets an `ib` link to every GPU
of the other nodes (the network is a non-blocking fabric), but a GPU goes off-node only through its
NIC: each NIC is one `Switch` budget per direction over the inter-node links of the GPUs that share it.
"""

from __future__ import annotations

import math
import re
import subprocess
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import product
from types import MappingProxyType

from collsynth.core.caps import LINKS
from collsynth.topologies.cluster import fattree
from collsynth.topologies.model import Link, Switch, Topology, TopologyError, links_from_matrix


# --- link classes --------------------------------------------------------------------------------
def peak_beta_us_per_mib(peak_gb_per_s: float) -> float:
    """Microseconds per MiB at the peak bandwidth `peak_gb_per_s` (vendor GB/s: 10^3 bytes per us)."""
    return 1048.576 / peak_gb_per_s

# Achieved / peak bandwidth of TACCL's measured NDv2 links (see the module docstring), both per MiB.
NVLINK_EFFICIENCY = peak_beta_us_per_mib(25.0) / 46.0
IB_EFFICIENCY = peak_beta_us_per_mib(12.5) / 105.0


def _beta_us_per_mb(peak_gb_per_s: float, efficiency: float) -> float:
    """Microseconds per MiB (2^20 bytes; the `beta_us_per_mb` unit) at `efficiency` times the peak bandwidth."""
    return peak_beta_us_per_mib(peak_gb_per_s) / efficiency


@dataclass(frozen=True)
class LinkClass:
    """Alpha-beta cost of one class of link, with where the figures come from."""
    name: str
    kind: str
    alpha_us: float
    beta_us_per_mb: float
    source: str

    def link(self, src: int, dst: int, bandwidth: int = 1) -> Link:
        return Link(src, dst, bandwidth, self.alpha_us, self.beta_us_per_mb, self.kind)


NVLINK_V100 = LinkClass("NVLink2 (V100), one link", "nvlink", 0.7, 46.0,
                        "TACCL NDv2 profile (measured); 25 GB/s peak per direction")
NVSWITCH_V100 = LinkClass("NVSwitch port (DGX-2 V100, 6 NVLink2)", "nvlink", 0.7, 8.0,
                          "TACCL DGX2 profile (measured); 150 GB/s peak per direction")
NVSWITCH_A100 = LinkClass("NVSwitch port (A100, 12 NVLink3)", "nvlink", 0.6,
                          round(_beta_us_per_mb(300, NVLINK_EFFICIENCY), 3),
                          "NVIDIA A100 data sheet: 300 GB/s per direction; alpha assumed")
NVSWITCH_H100 = LinkClass("NVSwitch port (H100, 18 NVLink4)", "nvlink", 0.5,
                          round(_beta_us_per_mb(450, NVLINK_EFFICIENCY), 3),
                          "NVIDIA H100 data sheet: 450 GB/s per direction; alpha assumed")
XGMI_MI50 = LinkClass("Infinity Fabric link (MI50/MI60)", "xgmi", 1.0,
                      round(_beta_us_per_mb(50, NVLINK_EFFICIENCY), 3),
                      "AMD MI50/MI60 launch (2018): 2 links, 200 GB/s P2P -> 50 GB/s per link and direction; "
                      "alpha assumed")
XGMI_MI300X = LinkClass("Infinity Fabric link (MI300X)", "xgmi", 0.8,
                        round(_beta_us_per_mb(64, NVLINK_EFFICIENCY), 3),
                        "AMD MI300X: 7 xGMI links of 128 GB/s bidirectional -> 64 GB/s per direction; "
                        "alpha assumed")
IB_EDR = LinkClass("InfiniBand EDR NIC (100 Gb/s)", "ib", 2.6, 105.0, "TACCL NDv2 profile (measured)")
IB_HDR = LinkClass("InfiniBand HDR NIC (200 Gb/s)", "ib", 2.3, round(_beta_us_per_mb(25, IB_EFFICIENCY), 3),
                   "25 GB/s peak at EDR's measured efficiency; alpha assumed")
IB_NDR = LinkClass("InfiniBand NDR NIC (400 Gb/s)", "ib", 2.0, round(_beta_us_per_mb(50, IB_EFFICIENCY), 3),
                   "50 GB/s peak at EDR's measured efficiency; alpha assumed")

LINK_CLASSES: tuple[LinkClass, ...] = (NVLINK_V100, NVSWITCH_V100, NVSWITCH_A100, NVSWITCH_H100, XGMI_MI50,
                                       XGMI_MI300X, IB_EDR, IB_HDR, IB_NDR)

# Largest topology a built-in name may ask for (fully_connected:4096 already has 16M links).
MAX_BUILTIN_RANKS = 4096


# --- generic shapes ------------------------------------------------------------------------------

def _symmetric(pairs: Iterable[tuple[int, int]], link_class: LinkClass = NVLINK_V100,
               bandwidth: int = 1) -> tuple[Link, ...]:
    """Both directions of every undirected pair, sorted, without duplicates."""
    both = {(a, b) for a, b in pairs if a != b} | {(b, a) for a, b in pairs if a != b}
    return tuple(link_class.link(s, d, bandwidth) for s, d in sorted(both))


def ring(num_ranks: int) -> Topology:
    """Bidirectional ring."""
    _at_least(num_ranks, 2, "ring")
    pairs = [(r, (r + 1) % num_ranks) for r in range(num_ranks)]
    return Topology(f"ring:{num_ranks}", num_ranks, _symmetric(pairs),
                    description=f"bidirectional ring of {num_ranks}")


def line(num_ranks: int) -> Topology:
    """Bidirectional chain 0 - 1 - ... - n-1."""
    _at_least(num_ranks, 2, "line")
    pairs = [(r, r + 1) for r in range(num_ranks - 1)]
    return Topology(f"line:{num_ranks}", num_ranks, _symmetric(pairs),
                    description=f"bidirectional chain of {num_ranks}")


def fully_connected(num_ranks: int) -> Topology:
    """A direct link between every ordered pair of ranks."""
    _at_least(num_ranks, 2, "fully_connected")
    LINKS.check(num_ranks * (num_ranks - 1), f"fully_connected:{num_ranks}", TopologyError)
    links = tuple(NVLINK_V100.link(s, d) for s in range(num_ranks) for d in range(num_ranks) if s != d)
    return Topology(f"fully_connected:{num_ranks}", num_ranks, links,
                    description=f"a direct link between every pair of {num_ranks} ranks")


def star(num_ranks: int, non_blocking: bool = True) -> Topology:
    """Rank 0 is the hub, linked both ways to every other rank. `non_blocking=False` (as in MSCCLang's
    `star`) adds budgets so that the hub sends one chunk per round in total, and receives one."""
    _at_least(num_ranks, 2, "star")
    leaves = range(1, num_ranks)
    switches: tuple[Switch, ...] = ()
    if not non_blocking:
        switches = (Switch("hub_out", frozenset((0, leaf) for leaf in leaves), 1, NVLINK_V100.beta_us_per_mb),
                    Switch("hub_in", frozenset((leaf, 0) for leaf in leaves), 1, NVLINK_V100.beta_us_per_mb))
    suffix = "" if non_blocking else " (blocking hub)"
    return Topology(f"star:{num_ranks}", num_ranks, _symmetric([(0, leaf) for leaf in leaves]),
                    switches, description=f"rank 0 is the hub of {num_ranks - 1} leaves{suffix}")


def _port_switches(ranks: Sequence[int], beta_us_per_mb: float, prefix: str = "") -> tuple[Switch, ...]:
    """One budget per rank and direction over its links to/from every other rank of `ranks`."""
    switches = []
    for r in ranks:
        others = [o for o in ranks if o != r]
        switches.append(Switch(f"{prefix}port_out_{r}", frozenset((r, o) for o in others), 1, beta_us_per_mb))
        switches.append(Switch(f"{prefix}port_in_{r}", frozenset((o, r) for o in others), 1, beta_us_per_mb))
    return tuple(switches)


def _switched_node(name: str, num_ranks: int, port: LinkClass, nics: tuple[tuple[int, ...], ...],
                   description: str) -> Topology:
    """GPUs on one switch fabric (SCCL's hub and spoke): a link for every pair, one chunk per round
    through each GPU's port in each direction."""
    pairs = [(s, d) for s in range(num_ranks) for d in range(s + 1, num_ranks)]
    return Topology(name, num_ranks, _symmetric(pairs, port),
                    _port_switches(range(num_ranks), port.beta_us_per_mb), nics=nics, description=description)


def hub_and_spoke(num_ranks: int) -> Topology:
    """Every rank on one central switch: direct links for every pair, but each rank's outgoing links share
    one budget of one chunk per round, and so do its incoming links."""
    _at_least(num_ranks, 2, "hub_and_spoke")
    LINKS.check(num_ranks * (num_ranks - 1), f"hub_and_spoke:{num_ranks}", TopologyError)
    return _switched_node(f"hub_and_spoke:{num_ranks}", num_ranks, NVLINK_V100, (),
                          f"{num_ranks} ranks on one switch, one chunk per round in and out of each")


def mesh2d(rows: int, cols: int) -> Topology:
    """A rows x cols grid, each rank linked to its 4 neighbours (no wrap-around). Rank = row * cols + col."""
    _dims_ok((rows, cols), "mesh2d")
    pairs = [(r * cols + c, r * cols + c + 1) for r in range(rows) for c in range(cols - 1)]
    pairs += [(r * cols + c, (r + 1) * cols + c) for r in range(rows - 1) for c in range(cols)]
    return Topology(f"mesh2d:{rows}x{cols}", rows * cols, _symmetric(pairs),
                    description=f"{rows}x{cols} 2-D mesh")


def torus(*dims: int) -> Topology:
    """A 2-D or 3-D torus (a mesh with wrap-around in every dimension); ranks in row-major order. A
    dimension of size 2 gives one link per pair (wrap-around and direct neighbour coincide)."""
    if len(dims) not in (2, 3):
        raise TopologyError(f"torus takes 2 or 3 dimensions (torus:4x4 or torus:4x4x4), got {len(dims)}")
    _dims_ok(dims, "torus")
    coords = list(product(*(range(d) for d in dims)))

    def rank(coord: Sequence[int]) -> int:
        value = 0
        for c, d in zip(coord, dims, strict=True):
            value = value * d + c
        return value

    pairs = []
    for coord in coords:
        for axis, size in enumerate(dims):
            if size > 1:
                nxt = list(coord)
                nxt[axis] = (coord[axis] + 1) % size
                pairs.append((rank(coord), rank(nxt)))
    shape = "x".join(str(d) for d in dims)
    return Topology(f"torus:{shape}", math.prod(dims), _symmetric(pairs),
                    description=f"{shape} {len(dims)}-D torus")


def hypercube(dimension: int) -> Topology:
    """2^D ranks, linked when their numbers differ in exactly one bit."""
    if dimension < 1:
        raise TopologyError(f"hypercube:{dimension} needs a dimension >= 1")
    n = 1 << dimension
    pairs = [(r, r ^ (1 << b)) for r in range(n) for b in range(dimension)]
    return Topology(f"hypercube:{dimension}", n, _symmetric(pairs), description=f"{dimension}-D hypercube")


# --- machines ------------------------------------------------------------------------------------

# DGX-1 / NDv2 (8 V100): hybrid cube-mesh, 6 NVLinks per GPU; pairs joined by two NVLinks have bandwidth 2.
# GPUs 0-3 and 4-7 sit on the two CPU sockets; 0-4, 1-5, 2-6, 3-7 cross between them.
DGX1_NVLINKS = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 2, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 2, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)


def dgx1() -> Topology:
    """8 V100 in the NVLink hybrid cube-mesh; 4 EDR NICs, one per pair of GPUs behind a PCIe switch."""
    return Topology("dgx1", 8, links_from_matrix(DGX1_NVLINKS), nics=((0, 1), (2, 3), (4, 5), (6, 7)),
                    description="8x V100, NVLink hybrid cube-mesh (6 NVLinks per GPU)")


def ndv2() -> Topology:
    """Azure NDv2: the DGX-1 NVLink mesh with one EDR NIC shared by all 8 GPUs (as TACCL models it)."""
    return Topology("ndv2", 8, links_from_matrix(DGX1_NVLINKS), nics=(tuple(range(8)),),
                    description="Azure NDv2: 8x V100 hybrid cube-mesh, 1 IB EDR NIC per node")


def dgx2() -> Topology:
    """16 V100 on NVSwitch, 8 EDR NICs (one per pair of GPUs)."""
    return _switched_node("dgx2", 16, NVSWITCH_V100, tuple((g, g + 1) for g in range(0, 16, 2)),
                          "DGX-2: 16x V100 on NVSwitch, 8 IB EDR NICs (one per 2 GPUs)")


def ndv4() -> Topology:
    """Azure NDv4 / DGX A100: 8 A100 on NVSwitch, 8 HDR NICs (one per GPU)."""
    return _switched_node("ndv4", 8, NVSWITCH_A100, tuple((g,) for g in range(8)),
                          "Azure NDv4 / DGX A100: 8x A100 on NVSwitch, 8 IB HDR NICs (one per GPU)")



def h100_nvswitch() -> Topology:
    """DGX/HGX H100: 8 H100 on NVSwitch, 8 NDR NICs (one per GPU)."""
    return _switched_node("h100_nvswitch", 8, NVSWITCH_H100, tuple((g,) for g in range(8)),
                          "DGX H100: 8x H100 on NVSwitch (NVLink4), 8 IB NDR NICs (one per GPU)")


def amd4() -> Topology:
    """4 MI50/MI60 on an Infinity Fabric Link bridge: a ring 0-1-3-2-0, two xGMI links per GPU (the same
    layout as SCCL's AMD4)."""
    pairs = [(0, 1), (1, 3), (3, 2), (2, 0)]
    return Topology("amd4", 4, _symmetric(pairs, XGMI_MI50),
                    description="4x MI50/MI60, Infinity Fabric ring (2 xGMI links per GPU)")


def mi300x() -> Topology:
    """8 MI300X on the OAM platform: fully connected, one xGMI link between every pair (7 per GPU); the built-in
    `amd8` (MSCCLang's `amd8()` is another model, below)."""
    pairs = [(s, d) for s in range(8) for d in range(s + 1, 8)]
    return Topology("amd8", 8, _symmetric(pairs, XGMI_MI300X),
                    description="8x MI300X, Infinity Fabric full mesh (7 xGMI links per GPU)")


# --- MSCCLang compatibility (msccl.topologies) -----------------------------------------------------

def nvlink_only(nvidia_smi_topo: str | None = None) -> Topology:
    """The NVLinks of this machine, from the text of `nvidia-smi topo -m` (run it when not given):
    a cell `NV<k>` between two GPUs is k NVLinks."""
    if nvidia_smi_topo is None:
        try:
            nvidia_smi_topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True,
                                             check=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            raise TopologyError(f"nvlink_only: cannot run 'nvidia-smi topo -m' ({exc}); pass its output "
                                "as text, or use a built-in topology") from None
    matrix = parse_nvidia_smi_topo(nvidia_smi_topo)
    return Topology("nvlink_only", len(matrix), links_from_matrix(matrix),
                    description="NVLinks read from nvidia-smi topo -m")


_ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")


def parse_nvidia_smi_topo(text: str) -> list[list[int]]:
    """NVLink counts between GPUs from `nvidia-smi topo -m` output (rows and columns named GPU<i>; the
    first such line is the column header)."""
    lines = [raw.split() for raw in _ANSI_ESCAPE.sub("", text).splitlines()]
    gpu_lines = [cells for cells in lines if cells and re.fullmatch(r"GPU\d+", cells[0])]
    rows = gpu_lines[1:]  # the first one is the header
    if not rows:
        raise TopologyError("nvidia-smi topo -m: found no GPU rows; is this the output of that command?")
    n = len(rows)
    matrix = []
    for i, cells in enumerate(rows):
        if len(cells) < n + 1:
            raise TopologyError(f"nvidia-smi topo -m: row {cells[0]} has {len(cells) - 1} cells, expected >= {n}")
        row = []
        for j, cell in enumerate(cells[1:n + 1]):
            match = re.fullmatch(r"NV(\d+)", cell)
            row.append(int(match.group(1)) if match and i != j else 0)
        matrix.append(row)
    return matrix


# --- multi-node composition ------------------------------------------------------------------------

def multi_node(node: Topology, copies: int, network: LinkClass = IB_EDR, *, name: str | None = None) -> Topology:
    """`copies` copies of a one-node topology joined by `network` links through the nodes' NICs.

    Every GPU gets a link to every GPU of the other nodes; each NIC is one budget per direction (one chunk
    per round, `network.beta_us_per_mb` under the alpha-beta model) over the inter-node links of its GPUs.
    A node without NIC information gets one NIC per GPU."""
    if node.machines is not None and node.num_machines > 1:
        raise TopologyError(f"cannot compose {node.name!r}: it already spans {node.num_machines} nodes; compose a "
                            "one-node topology (e.g. 4xndv2, not 2x2xndv2)")
    if copies < 1:
        raise TopologyError(f"{copies}x{node.name}: the number of nodes must be >= 1")
    g = node.num_ranks
    total = copies * g
    if total > MAX_BUILTIN_RANKS:
        raise TopologyError(f"{copies}x{node.name} has {total} ranks; the limit is {MAX_BUILTIN_RANKS}")
    LINKS.check(total * (total - g), f"{copies}x{node.name} (every GPU to every remote GPU)", TopologyError)
    node_nics = node.nics or tuple((r,) for r in range(g))
    links: list[Link] = []
    switches: list[Switch] = []
    nics: list[tuple[int, ...]] = []
    for k in range(copies):
        base = k * g
        links += [Link(base + x.src, base + x.dst, x.bandwidth, x.alpha_us, x.beta_us_per_mb, x.kind)
                  for x in node.link_list]
        switches += [Switch(f"node{k}.{s.name}", frozenset((base + a, base + b) for a, b in s.links), s.bandwidth,
                            s.beta_us_per_mb) for s in node.switches]
    for src in range(total):
        for dst in range(total):
            if src // g != dst // g:
                links.append(network.link(src, dst))
    for k in range(copies):
        outside = [r for r in range(total) if r // g != k]
        for i, nic in enumerate(node_nics):
            ranks = tuple(k * g + r for r in nic)
            nics.append(ranks)
            switches.append(Switch(f"node{k}.nic{i}_out", frozenset((r, o) for r in ranks for o in outside), 1,
                                   network.beta_us_per_mb))
            switches.append(Switch(f"node{k}.nic{i}_in", frozenset((o, r) for r in ranks for o in outside), 1,
                                   network.beta_us_per_mb))
    return Topology(name or f"{copies}x{node.name}", total, tuple(links), tuple(switches),
                    machines=tuple(r // g for r in range(total)), nics=tuple(nics),
                    description=f"{copies} nodes of {node.name} ({node.description or node.name}) joined by "
                                f"{network.name}")


# --- the registry ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class BuiltinTopology:
    """One entry of `topo list`: how to build it by name and what it is."""
    name: str
    build: Callable[..., Topology]
    params: str  # how the parameters are written after the colon ("" for fixed machines)
    arities: tuple[int, ...]  # accepted numbers of parameters
    ranks: Callable[..., int]  # number of ranks for the given parameters
    ranks_text: str
    description: str
    example: str
    network: LinkClass = IB_EDR  # inter-node links when composed as NxNAME
    aliases: tuple[str, ...] = ()


def _fixed(n: int) -> Callable[..., int]:
    return lambda: n


BUILTIN_TOPOLOGIES: MappingProxyType[str, BuiltinTopology] = MappingProxyType({spec.name: spec for spec in (
    BuiltinTopology("ring", ring, "N", (1,), lambda n: n, "N", "bidirectional ring", "ring:8"),
    BuiltinTopology("line", line, "N", (1,), lambda n: n, "N", "bidirectional chain", "line:4"),
    BuiltinTopology("fully_connected", fully_connected, "N", (1,), lambda n: n, "N",
                    "a direct link between every pair", "fully_connected:8"),
    BuiltinTopology("star", star, "N", (1,), lambda n: n, "N", "rank 0 is the hub, linked to every other rank",
                    "star:5"),
    BuiltinTopology("hub_and_spoke", hub_and_spoke, "N", (1,), lambda n: n, "N",
                    "all ranks on one switch; 1 chunk/round in and out of each (SCCL)", "hub_and_spoke:8"),
    BuiltinTopology("mesh2d", mesh2d, "RxC", (2,), lambda r, c: r * c, "R*C", "2-D grid, 4 neighbours, no wrap",
                    "mesh2d:4x4"),
    BuiltinTopology("torus", torus, "AxBxC | AxB", (2, 3), lambda *d: math.prod(d), "A*B*C",
                    "2-D or 3-D torus (wrap-around mesh)", "torus:4x4x4"),
    BuiltinTopology("hypercube", hypercube, "D", (1,), lambda d: 1 << max(d, 0), "2^D",
                    "ranks linked when they differ in one bit", "hypercube:4"),
    BuiltinTopology("fattree", fattree, "K", (1,), lambda k: k * (k // 2), "K*K/2",
                    "two-level K-ary fat-tree (leaf/spine budgets)", "fattree:8"),
    BuiltinTopology("dgx1", dgx1, "", (0,), _fixed(8), "8", "8x V100 NVLink hybrid cube-mesh, 4 EDR NICs", "dgx1"),
    BuiltinTopology("ndv2", ndv2, "", (0,), _fixed(8), "8", "Azure NDv2: DGX-1 NVLinks, 1 EDR NIC per node",
                    "2xndv2"),
    BuiltinTopology("dgx2", dgx2, "", (0,), _fixed(16), "16", "16x V100 on NVSwitch, 8 EDR NICs", "4xdgx2"),
    BuiltinTopology("ndv4", ndv4, "", (0,), _fixed(8), "8", "Azure NDv4 / DGX A100: 8x A100 on NVSwitch, 8 HDR NICs",
                    "2xndv4", IB_HDR, ("dgx_a100",)),
    BuiltinTopology("h100_nvswitch", h100_nvswitch, "", (0,), _fixed(8), "8",
                    "8x H100 on NVSwitch (NVLink4), 8 NDR NICs", "2xh100_nvswitch", IB_NDR),
    BuiltinTopology("amd4", amd4, "", (0,), _fixed(4), "4", "4x MI50/MI60, Infinity Fabric ring", "amd4"),
    BuiltinTopology("amd8", mi300x, "", (0,), _fixed(8), "8", "8x MI300X, Infinity Fabric full mesh", "amd8"),
)})

# name -> (builder, number of integer parameters) -- the original contract, kept for callers that use it.
# (torus also accepts 2 parameters; see BUILTIN_TOPOLOGIES for the full description.)
BUILTINS: MappingProxyType[str, tuple[Callable[..., Topology], int]] = MappingProxyType(
    {name: (spec.build, max(spec.arities))
     for spec in BUILTIN_TOPOLOGIES.values() for name in (spec.name, *spec.aliases)})


def _key(name: str) -> str:
    """Forgiving lookup key: case, `-`, `_` and spaces do not matter (`Fully-Connected` = `fully_connected`)."""
    return re.sub(r"[-_\s]", "", name.lower())


_BY_KEY: MappingProxyType[str, BuiltinTopology] = MappingProxyType(
    {_key(name): spec for spec in BUILTIN_TOPOLOGIES.values() for name in (spec.name, *spec.aliases)})

_MULTI_NODE = re.compile(r"(\d+)\s*[x*]\s*(\S.*)", re.IGNORECASE)


def lookup(name: str) -> BuiltinTopology:
    """The registry entry for a built-in's base name (no parameters), forgivingly."""
    spec = _BY_KEY.get(_key(name))
    if spec is None:
        known = ", ".join(sorted(BUILTIN_TOPOLOGIES))
        raise TopologyError(f"unknown topology {name!r}; built-ins are: {known}, NxNAME for N nodes (e.g. 2xndv2), "
                            "or give a path to a JSON file")
    return spec


def parse_builtin(name: str) -> tuple[BuiltinTopology, tuple[int, ...]]:
    """(registry entry, integer parameters) of a one-node built-in name such as `torus:4x4x4`."""
    base, _, args = name.strip().partition(":")
    spec = lookup(base)
    parts = [p.strip() for p in re.split(r"[x,]", args, flags=re.IGNORECASE)] if args.strip() else []
    if len(parts) not in spec.arities:
        if spec.params:
            raise TopologyError(f"topology {spec.name!r} takes parameters {spec.params}, e.g. {spec.example}; "
                                f"got {name!r}")
        raise TopologyError(f"topology {spec.name!r} takes no parameters; got {name!r} (for several nodes "
                            f"write e.g. 2x{spec.name})")
    try:
        params = tuple(int(p) for p in parts)
    except ValueError:
        raise TopologyError(f"topology {name!r}: parameters must be integers, e.g. {spec.example}") from None
    if any(p < 1 for p in params):
        raise TopologyError(f"topology {name!r}: parameters must be >= 1")
    if spec.name == "hypercube" and params[0] > 12:
        raise TopologyError(f"topology {name!r}: hypercube dimension is limited to 12 ({1 << 12} ranks)")
    ranks = spec.ranks(*params)
    if ranks > MAX_BUILTIN_RANKS:
        raise TopologyError(f"topology {name!r} has {ranks} ranks; built-ins are limited to {MAX_BUILTIN_RANKS}")
    return spec, params


def builtin(name: str) -> Topology:
    """Build a built-in topology from its name: `ring:8`, `dgx1`, `torus:4x4x4`, `2xndv2`, ...

    Forgiving: case-insensitive, `-` and `_` equivalent (`DGX-A100`, `Fully_Connected:4`)."""
    text = name.strip()
    multi = _MULTI_NODE.fullmatch(text)
    if multi:
        copies = int(multi.group(1))
        spec, params = parse_builtin(multi.group(2))
        if copies < 1:
            raise TopologyError(f"topology {name!r}: the number of nodes must be >= 1")
        if copies * spec.ranks(*params) > MAX_BUILTIN_RANKS:
            raise TopologyError(f"topology {name!r} has {copies * spec.ranks(*params)} ranks; built-ins are "
                                f"limited to {MAX_BUILTIN_RANKS}")
        node = spec.build(*params)
        return multi_node(node, copies, spec.network, name=f"{copies}x{node.name}")
    spec, params = parse_builtin(text)
    return spec.build(*params)


def _at_least(n: int, low: int, name: str) -> None:
    if n < low:
        raise TopologyError(f"{name}:{n} needs at least {low} ranks")


def _dims_ok(dims: Sequence[int], name: str) -> None:
    shape = "x".join(str(d) for d in dims)
    if any(d < 1 for d in dims) or math.prod(dims) < 2:
        raise TopologyError(f"{name}:{shape}: every dimension must be >= 1 and there must be at least 2 ranks")
