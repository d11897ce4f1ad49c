"""Import of TACCL topology profiles (the JSON files of microsoft/taccl's `examples/topo`).

A profile gives alpha-beta costs for one chunk of a fixed size (named in the profile's name, e.g.
`NDv2_1MB`), possibly multiplied by a constant (TACCL rounds costs to integers, so its 1KB profiles are
x100 and its 32KB profile x10). We turn them into per-link `alpha_us` and `beta_us_per_mb`:
    alpha_us = alpha / scale,   beta_us_per_mb = beta / scale / chunk_MB.
The link matrix is known by name (NDv2: the DGX-1 hybrid cube-mesh, two link classes; DGX2: 16 GPUs on
NVSwitch) or given as `links`/`betas` matrices ("custom", indexed [dst][src] as in TACCL); a profile
with one link class and no matrix is a fully connected node ("hub and spoke").

Multi-node: `num_nodes` copies of the node; every GPU gets an `ib` link to every GPU of the other nodes
(a sketch picks which ones are used), and the GPUs behind one NIC share it: one `Switch` per NIC and
direction whose budget serializes their inter-node transfers at `remote_beta`.

Extensions to TACCL's format (optional keys): `chunk_bytes` (the size the costs are for),
`cost_scale` (the constant they are multiplied by), `nnodes` (number of nodes).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from collsynth.core.caps import RANKS
from collsynth.topologies.library import DGX1_NVLINKS
from collsynth.topologies.model import Link, Switch, Topology, TopologyError

IB_KIND = "ib"
NVLINK_KIND = "nvlink"
MB = 1 << 20

_PROFILE_KEYS = ("gpus_per_node", "alpha")
_SIZE_RE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]?)B\b", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def is_taccl_profile(data: Mapping[str, Any]) -> bool:
    """True when a JSON object looks like a TACCL topology profile (rather than our own schema)."""
    return isinstance(data, Mapping) and all(k in data for k in _PROFILE_KEYS) and "num_ranks" not in data


def profile_chunk_bytes(data: Mapping[str, Any], name: str = "") -> int:
    """The chunk size the profile's costs are for: `chunk_bytes`, else the size in its name (`NDv2_1MB`)."""
    if "chunk_bytes" in data:
        value = _number(data, "chunk_bytes", name)
        if value <= 0:
            raise TopologyError(f"TACCL profile {name!r}: 'chunk_bytes' must be > 0, got {value}")
        return int(value)
    for text in (str(data.get("name", "")), name):
        matches = list(_SIZE_RE.finditer(text))
        if matches:
            match = matches[-1]
            return int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    raise TopologyError(f"TACCL profile {name!r}: cannot tell which chunk size its costs are for; add "
                        "\"chunk_bytes\": 1048576 (or end its \"name\" with the size, e.g. NDv2_1MB)")


def profile_cost_scale(data: Mapping[str, Any], name: str = "") -> float:
    """The constant the profile's costs are multiplied by: `cost_scale`, else inferred from the intra-node
    alpha (real NVLink alphas are below 1 us; TACCL scales small-size profiles by a power of ten so that
    costs survive rounding to integers: alpha 30 -> x100, alpha 3 -> x10, alpha 0.3 -> x1)."""
    if "cost_scale" in data:
        scale = _number(data, "cost_scale", name)
        if scale <= 0:
            raise TopologyError(f"TACCL profile {name!r}: 'cost_scale' must be > 0, got {scale}")
        return scale
    alpha = _number(data, "alpha", name)
    if alpha < 1:
        return 1.0
    return float(10 ** (math.floor(math.log10(alpha)) + 1))


def load_taccl_profile(data: dict, *, name: str, num_nodes: int | None = None, taccl_costs: bool = False) -> Topology:
    """A Topology from a TACCL topology profile (see the module docstring for the conversion).

    `num_nodes` overrides the profile's optional `nnodes` (default 1). `taccl_costs=True` charges every
    intra-node transfer the profile's `node_invbws_list` entry (alpha 0, as TACCL's routing and scheduling
    MILPs do; `invbws` for custom profiles), so that predicted times compare one to one with TACCL's;
    such a topology is exact at the profile's chunk size only."""
    if not is_taccl_profile(data):
        missing = [k for k in _PROFILE_KEYS if k not in data]
        raise TopologyError(f"TACCL profile {name!r}: missing field(s) {missing}; a TACCL profile needs "
                            "gpus_per_node, alpha, node_betas_list (or links/betas matrices)")
    from collsynth.topologies.schema import check_taccl_dict

    check_taccl_dict(data, f"TACCL profile {name!r}", TopologyError)  # exact types, finite numbers, known keys
    if num_nodes is not None:
        RANKS.check(num_nodes * data["gpus_per_node"], f"TACCL profile {name!r}: ranks of {num_nodes} nodes",
                    TopologyError)
    gpus = int(_number(data, "gpus_per_node", name))
    if gpus < 1 or gpus != _number(data, "gpus_per_node", name):
        raise TopologyError(f"TACCL profile {name!r}: 'gpus_per_node' must be a positive integer")
    nodes = num_nodes if num_nodes is not None else int(_number(data, "nnodes", name, default=1))
    if nodes < 1:
        raise TopologyError(f"TACCL profile {name!r}: the number of nodes must be >= 1, got {nodes}")
    scale = profile_cost_scale(data, name)
    chunk_mb = profile_chunk_bytes(data, name) / MB
    alpha_us = _number(data, "alpha", name) / scale
    if alpha_us < 0:
        raise TopologyError(f"TACCL profile {name!r}: 'alpha' must be >= 0")

    kind, counts, betas = _node_links(data, gpus, name)
    if taccl_costs:
        betas = _invbws(data, kind, counts, betas, gpus, name)
        alpha_us = 0.0
    links: list[Link] = []
    for node in range(nodes):
        base = node * gpus
        for (src, dst), beta in betas.items():
            links.append(Link(base + src, base + dst, counts[(src, dst)], alpha_us, beta / scale / chunk_mb,
                              NVLINK_KIND))
    switches: list[Switch] = []
    if kind == "dgx2":
        # NVSwitch: each GPU's port into (and out of) the switch fabric carries one transfer at a time.
        for node in range(nodes):
            for g in range(gpus):
                r = node * gpus + g
                beta = betas[(g, (g + 1) % gpus)] / scale / chunk_mb
                out_links = frozenset((r, node * gpus + d) for d in range(gpus) if d != g)
                in_links = frozenset((node * gpus + s, r) for s in range(gpus) if s != g)
                switches.append(Switch(f"nvswitch_out_{r}", out_links, 1, beta))
                switches.append(Switch(f"nvswitch_in_{r}", in_links, 1, beta))

    nics: list[tuple[int, ...]] = []
    if nodes > 1:
        nics_per_node = int(_number(data, "nics_per_node", name, default=1))
        if nics_per_node < 1 or gpus % nics_per_node:
            raise TopologyError(f"TACCL profile {name!r}: 'nics_per_node' ({nics_per_node}) must divide "
                                f"gpus_per_node ({gpus})")
        for key in ("remote_alpha", "remote_beta"):
            if key not in data or _number(data, key, name) < 0:
                raise TopologyError(f"TACCL profile {name!r}: a multi-node topology needs '{key}' >= 0")
        r_alpha = _number(data, "remote_alpha", name) / scale
        r_beta = _number(data, "remote_beta", name) / scale / chunk_mb
        total = nodes * gpus
        for src in range(total):
            for dst in range(total):
                if src // gpus != dst // gpus:
                    links.append(Link(src, dst, 1, r_alpha, r_beta, IB_KIND))
        per_nic = gpus // nics_per_node
        for node in range(nodes):
            for nic in range(nics_per_node):
                ranks = tuple(node * gpus + nic * per_nic + i for i in range(per_nic))
                nics.append(ranks)
                outside = [r for r in range(total) if r // gpus != node]
                out_links = frozenset((r, o) for r in ranks for o in outside)
                in_links = frozenset((o, r) for r in ranks for o in outside)
                switches.append(Switch(f"nic_out_{node}_{nic}", out_links, 1, r_beta))
                switches.append(Switch(f"nic_in_{node}_{nic}", in_links, 1, r_beta))

    profile_name = str(data.get("name", name))
    size_text = _size_text(chunk_mb * MB)
    return Topology(
        name=name if nodes == 1 else f"{nodes}x{name}",
        num_ranks=nodes * gpus,
        link_list=tuple(links),
        switches=tuple(switches),
        machines=tuple(r // gpus for r in range(nodes * gpus)) if nodes > 1 else None,
        nics=tuple(nics),
        description=f"TACCL profile {profile_name} ({kind}, {nodes} node(s) x {gpus} GPUs, costs for "
                    f"{size_text} chunks, scale x{scale:g})",
    )


def _node_links(data: Mapping[str, Any], gpus: int, name: str
                ) -> tuple[str, dict[tuple[int, int], int], dict[tuple[int, int], float]]:
    """(kind, link counts, per-chunk beta) of the links inside one node."""
    profile_name = f"{data.get('name', '')} {name}".lower()
    if "links" in data:
        link_m = _matrix(data, "links", gpus, name)
        beta_m = _matrix(data, "betas", gpus, name)
        counts, betas = {}, {}
        for dst in range(gpus):
            for src in range(gpus):
                if link_m[dst][src] > 0 and src != dst:
                    if beta_m[dst][src] <= 0:
                        raise TopologyError(f"TACCL profile {name!r}: betas[{dst}][{src}] must be > 0 where "
                                            "links has a link")
                    counts[(src, dst)] = int(link_m[dst][src])
                    betas[(src, dst)] = float(beta_m[dst][src])
        return "custom", counts, betas
    class_betas = data.get("node_betas_list")
    if not isinstance(class_betas, list) or not class_betas or not all(
            isinstance(b, (int, float)) and b > 0 for b in class_betas):
        raise TopologyError(f"TACCL profile {name!r}: 'node_betas_list' must be a non-empty list of positive "
                            "numbers (one beta per link class)")
    if "ndv2" in profile_name or "dgx1" in profile_name:
        if gpus != 8 or len(class_betas) != 2:
            raise TopologyError(f"TACCL profile {name!r}: an NDv2 profile needs gpus_per_node 8 and two "
                                f"node_betas_list entries, got {gpus} and {len(class_betas)}")
        counts, betas = {}, {}
        for src in range(8):
            for dst in range(8):
                nvlinks = DGX1_NVLINKS[src][dst]
                if nvlinks:
                    counts[(src, dst)] = nvlinks
                    # Pairs joined by two NVLinks are the fast class (the first, smaller beta).
                    betas[(src, dst)] = float(class_betas[0] if nvlinks == 2 else class_betas[1])
        return "ndv2", counts, betas
    if len(class_betas) != 1:
        raise TopologyError(f"TACCL profile {name!r}: {len(class_betas)} link classes but no link matrix; "
                            "name the profile NDv2_* or give 'links' and 'betas' matrices")
    kind = "dgx2" if "dgx2" in profile_name else "hub_and_spoke"
    pairs = [(s, d) for s in range(gpus) for d in range(gpus) if s != d]
    return kind, dict.fromkeys(pairs, 1), dict.fromkeys(pairs, float(class_betas[0]))


def _invbws(data: Mapping[str, Any], kind: str, counts: dict[tuple[int, int], int],
            betas: dict[tuple[int, int], float], gpus: int, name: str) -> dict[tuple[int, int], float]:
    """Per-link invbw (TACCL's alpha + beta of one chunk) in place of beta."""
    if kind == "custom":
        inv = _matrix(data, "invbws", gpus, name)
        return {(s, d): inv[d][s] for (s, d) in betas}
    classes = data.get("node_invbws_list")
    class_betas = data.get("node_betas_list")
    if (not isinstance(classes, list) or not isinstance(class_betas, list) or len(classes) != len(class_betas)
            or not all(isinstance(x, (int, float)) and x > 0 for x in classes)):
        raise TopologyError(f"TACCL profile {name!r}: 'node_invbws_list' must list one positive number per entry of "
                            "node_betas_list")
    by_beta = {float(b): float(i) for b, i in zip(class_betas, classes, strict=True)}
    return {arc: by_beta[beta] for arc, beta in betas.items()}


def _matrix(data: Mapping[str, Any], key: str, gpus: int, name: str) -> list[list[float]]:
    value = data.get(key)
    if (not isinstance(value, list) or len(value) != gpus
            or not all(isinstance(row, list) and len(row) == gpus for row in value)):
        raise TopologyError(f"TACCL profile {name!r}: '{key}' must be a {gpus}x{gpus} matrix (gpus_per_node)")
    try:
        return [[float(x) for x in row] for row in value]
    except (TypeError, ValueError):
        raise TopologyError(f"TACCL profile {name!r}: '{key}' must hold numbers only") from None


def _number(data: Mapping[str, Any], key: str, name: str, default: float | None = None) -> float:
    value = data.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TopologyError(f"TACCL profile {name!r}: '{key}' must be a number, got {value!r}")
    return float(value)


def _size_text(nbytes: float) -> str:
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= factor:
            return f"{nbytes / factor:g}{unit}"
    return f"{nbytes:g}B"
