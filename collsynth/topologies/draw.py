"""`draw_topology(topo, path)`: a picture of a topology (PNG, SVG or PDF).

GPUs are circles, grouped by node for multi-node topologies (a dashed box per node). Links are lines,
their width growing with bandwidth and their colour naming the link kind; a link present in one
direction only is dashed. A node whose GPUs each have a switch port budget (NVSwitch, hub and spoke)
is drawn as spokes to one square switch instead of a full mesh. In multi-node topologies NICs are
small squares joined to their GPUs and to one InfiniBand fabric in the middle (each GPU may reach every
GPU of the other nodes through it). matplotlib is imported inside the function, so importing this module stays cheap.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path

import networkx as nx

from collsynth.core.files import atomic_path
from collsynth.topologies.model import Topology, TopologyError

KIND_COLOURS = {"nvlink": "#4c9a2a", "xgmi": "#c0392b", "ib": "#2e6fbd", "pcie": "#7f7f7f"}
OTHER_COLOUR = "#8e44ad"
FORMATS = ("png", "svg", "pdf")
# Above this many ranks in one node, a spring layout is slow and unreadable: use a circle.
_SPRING_LIMIT = 400
_CLUSTER_RADIUS = 1.0
_CLUSTER_SPACING = 3.6


def _colour(kind: str) -> str:
    return KIND_COLOURS.get(kind, OTHER_COLOUR)


def _cluster_centres(count: int) -> list[tuple[float, float]]:
    """Centres of `count` node clusters: a row up to 4, else a near-square grid."""
    cols = count if count <= 4 else math.ceil(math.sqrt(count))
    return [((i % cols) * _CLUSTER_SPACING, -(i // cols) * _CLUSTER_SPACING) for i in range(count)]


def _local_layout(topo: Topology, ranks: list[int]) -> dict[int, tuple[float, float]]:
    """Positions of one node's ranks around (0, 0) within the cluster radius."""
    if len(ranks) == 1:
        return {ranks[0]: (0.0, 0.0)}
    if len(ranks) <= 16 or len(ranks) > _SPRING_LIMIT:
        step = 2 * math.pi / len(ranks)
        return {r: (_CLUSTER_RADIUS * math.sin(i * step), _CLUSTER_RADIUS * math.cos(i * step))
                for i, r in enumerate(ranks)}
    inside = set(ranks)
    graph = nx.Graph()
    graph.add_nodes_from(ranks)
    graph.add_edges_from((x.src, x.dst) for x in topo.link_list if x.src in inside and x.dst in inside)
    pos = nx.spring_layout(graph, seed=0, iterations=200)
    scale = max(max(abs(float(x)), abs(float(y))) for x, y in pos.values()) or 1.0
    return {r: (float(pos[r][0]) / scale * _CLUSTER_RADIUS, float(pos[r][1]) / scale * _CLUSTER_RADIUS)
            for r in ranks}


def _switched_clusters(topo: Topology, groups: dict[int, list[int]]) -> dict[int, int]:
    """Node -> port budget (chunks per round) for nodes where every GPU has a switch port over its links to
    every other GPU of the node (NVSwitch / hub and spoke)."""
    by_links = {switch.links: switch.bandwidth for switch in topo.switches}
    switched = {}
    for node, ranks in groups.items():
        if len(ranks) < 3:
            continue
        budgets = [by_links.get(frozenset((r, o) for o in ranks if o != r)) for r in ranks]
        if all(b is not None for b in budgets):
            switched[node] = max(b for b in budgets if b is not None)
    return switched


def draw_topology(topo: Topology, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Draw `topo` to `path` (format from the suffix: .png, .svg or .pdf), atomically. Returns the path."""
    path = Path(path)
    fmt = path.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise TopologyError(f"{path}: cannot tell the picture format from the suffix; use one of "
                            + ", ".join(f".{f}" for f in FORMATS))
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TopologyError(f"{path}: folder {folder} does not exist; create it first")

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.collections import LineCollection
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Rectangle

    groups: dict[int, list[int]] = defaultdict(list)
    for r in range(topo.num_ranks):
        groups[topo.node_of(r)].append(r)
    node_ids = sorted(groups)
    centres = dict(zip(node_ids, _cluster_centres(len(node_ids)), strict=True))
    pos: dict[int, tuple[float, float]] = {}
    for node in node_ids:
        cx, cy = centres[node]
        for r, (x, y) in _local_layout(topo, groups[node]).items():
            pos[r] = (cx + x, cy + y)
    switched = _switched_clusters(topo, groups)
    multi = len(node_ids) > 1
    fabric = (sum(c[0] for c in centres.values()) / len(centres), sum(c[1] for c in centres.values()) / len(centres))
    if multi and len(node_ids) <= 4:
        fabric = (fabric[0], fabric[1] - 1.9 * _CLUSTER_RADIUS)  # below the row of nodes, not on top of one

    width_in = min(22.0, 4.5 + 3.2 * (max(c[0] for c in centres.values()) - min(c[0] for c in centres.values()))
                   / _CLUSTER_SPACING + 2.0)
    height_in = min(22.0, 4.5 + 3.2 * (max(c[1] for c in centres.values()) - min(c[1] for c in centres.values()))
                    / _CLUSTER_SPACING + (1.5 if multi else 0.5))
    fig = Figure(figsize=(width_in, height_in))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.set_aspect("equal")
    ax.axis("off")

    # --- links inside nodes (and between nodes that are not network links) -------------------------
    pairs: dict[tuple[int, int], list] = defaultdict(list)
    network_ranks: set[int] = set()
    for link in topo.link_list:
        a, b = topo.node_of(link.src), topo.node_of(link.dst)
        if a != b and (link.kind == "ib" or topo.nics):
            network_ranks.update((link.src, link.dst))
            continue
        if a == b and a in switched:
            continue
        pairs[(min(link.src, link.dst), max(link.src, link.dst))].append(link)
    kinds_drawn: set[str] = set()
    segments: dict[tuple[str, float, bool], list] = defaultdict(list)
    for (s, d), links in pairs.items():
        kind = links[0].kind
        bandwidth = max(x.bandwidth for x in links)
        one_way = len(links) == 1
        segments[(kind, 0.8 + 1.4 * min(bandwidth, 6), one_way)].append([pos[s], pos[d]])
        kinds_drawn.add(kind)
    for node, budget in switched.items():
        cx, cy = centres[node]
        kind = next(x.kind for x in topo.link_list if topo.node_of(x.src) == node and topo.node_of(x.dst) == node)
        segments[(kind, 0.8 + 1.4 * min(budget, 6), False)].extend([[pos[r], (cx, cy)] for r in groups[node]])
        kinds_drawn.add(kind)

    # --- NICs and the network ---------------------------------------------------------------------
    nic_points = []
    if multi and network_ranks:
        nic_of: dict[int, tuple[float, float]] = {}
        for nic in topo.nics:
            node = topo.node_of(nic[0])
            cx, cy = centres[node]
            mx = sum(pos[r][0] for r in nic) / len(nic) - cx
            my = sum(pos[r][1] for r in nic) / len(nic) - cy
            if math.hypot(mx, my) < 1e-6:  # one NIC for the whole node: put it on the side facing the fabric
                mx, my = fabric[0] - cx, fabric[1] - cy
            norm = math.hypot(mx, my) or 1.0
            point = (cx + 1.45 * _CLUSTER_RADIUS * mx / norm, cy + 1.45 * _CLUSTER_RADIUS * my / norm)
            nic_points.append(point)
            for r in nic:
                nic_of[r] = point
                segments[("pcie", 0.6, False)].append([pos[r], point])
            segments[("ib", 1.0, False)].append([point, fabric])
        for r in sorted(network_ranks - set(nic_of)):  # GPUs with network links but no NIC listed
            segments[("ib", 1.0, False)].append([pos[r], fabric])
        kinds_drawn.add("ib")

    for (kind, width, one_way), segs in segments.items():
        ax.add_collection(LineCollection(segs, colors=_colour(kind), linewidths=width,
                                         linestyles="dashed" if one_way else "solid", alpha=0.75, zorder=1))

    # --- nodes, switches, NICs, fabric ------------------------------------------------------------
    n = topo.num_ranks
    size = 260 if n <= 16 else 120 if n <= 64 else 40
    xs, ys = zip(*(pos[r] for r in range(n)), strict=True)
    ax.scatter(xs, ys, s=size, c="#f5f5f5", edgecolors="#333333", linewidths=1.0, zorder=3)
    if n <= 128:
        for r in range(n):
            ax.annotate(str(r), pos[r], ha="center", va="center", fontsize=8 if n <= 32 else 5, zorder=4)
    for node in switched:
        ax.scatter([centres[node][0]], [centres[node][1]], s=420, marker="s", c="#ffd966", edgecolors="#333333",
                   zorder=3)
        ax.annotate("SW", centres[node], ha="center", va="center", fontsize=7, zorder=4)
    if nic_points:
        ax.scatter([p[0] for p in nic_points], [p[1] for p in nic_points], s=90, marker="s", c="#aed6f1",
                   edgecolors="#333333", zorder=3)
        ax.scatter([fabric[0]], [fabric[1]], s=700, marker="h", c="#d6eaf8", edgecolors="#2e6fbd", zorder=3)
        ax.annotate("IB", fabric, ha="center", va="center", fontsize=8, zorder=4)
    if multi:
        pad = 1.65 * _CLUSTER_RADIUS
        for node in node_ids:
            cx, cy = centres[node]
            ax.add_patch(Rectangle((cx - pad, cy - pad), 2 * pad, 2 * pad, fill=False, linestyle="--",
                                   edgecolor="#999999", zorder=0))
            ax.annotate(f"node {node}", (cx - pad + 0.05, cy + pad - 0.05), ha="left", va="top", fontsize=8,
                        color="#555555")

    handles = [Line2D([0], [0], color=_colour(k), lw=2.5, label=k) for k in sorted(kinds_drawn - {"pcie"})]
    if switched:
        handles.append(Line2D([0], [0], marker="s", color="w", markerfacecolor="#ffd966", markeredgecolor="#333333",
                              markersize=10, label="switch (per-GPU port budgets)"))
    if nic_points:
        handles.append(Line2D([0], [0], marker="s", color="w", markerfacecolor="#aed6f1", markeredgecolor="#333333",
                              markersize=8, label="NIC (budget per direction)"))
    if handles:
        ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False)
    other_switches = len(topo.switches) - 2 * sum(len(groups[node]) for node in switched) \
        - (2 * len(topo.nics) if nic_points else 0)
    subtitle = f"{n} ranks, {len(topo.link_list)} links, {len(topo.switches)} switch budgets"
    if other_switches > 0:
        subtitle += f" ({other_switches} not drawn)"
    ax.set_title(f"{title or topo.name}\n{subtitle}; fingerprint {topo.fingerprint()}", fontsize=10)
    ax.autoscale_view()
    ax.margins(0.08)

    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120, bbox_inches="tight")
    return path
