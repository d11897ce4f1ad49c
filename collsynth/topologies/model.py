"""The topology model shared by every stage (DESIGN.md, "Topology").

Ranks are 0..n-1. A `Link` is directed and carries two cost models at once:
- `bandwidth`: chunks the link carries per round (the SMT/SCCL model), an integer >= 1;
- `alpha_us`, `beta_us_per_mb`: the alpha-beta model (MILP, simulator): moving m MB costs
  alpha_us + m * beta_us_per_mb microseconds.
A `Switch` is a set of links that share one budget (an NVSwitch port, a NIC shared by GPUs): at most
`bandwidth` chunks per round cross all of its links together, and under the alpha-beta model the
transfers on its links serialize at `beta_us_per_mb`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import networkx as nx

from collsynth.core.errors import CollsynthError

# Default alpha-beta costs by link class (V100 NVLink / InfiniBand EDR as in TACCL's NDv2 profile).
NVLINK_ALPHA_US = 0.7
NVLINK_BETA_US_PER_MB = 46.0
IB_ALPHA_US = 2.6
IB_BETA_US_PER_MB = 105.0


class TopologyError(CollsynthError):
    """A topology that is malformed or cannot be built (the message says what and how to fix it)."""


@dataclass(frozen=True)
class Link:
    src: int
    dst: int
    bandwidth: int = 1
    alpha_us: float = NVLINK_ALPHA_US
    beta_us_per_mb: float = NVLINK_BETA_US_PER_MB
    kind: str = "nvlink"

    def cost_us(self, megabytes: float) -> float:
        """Alpha-beta time of one transfer of `megabytes` on this link."""
        return self.alpha_us + megabytes * self.beta_us_per_mb


@dataclass(frozen=True)
class Switch:
    name: str
    links: frozenset[tuple[int, int]]
    bandwidth: int = 1
    beta_us_per_mb: float = NVLINK_BETA_US_PER_MB

    def msccl_tuple(self) -> tuple[list[int], list[int], int, str]:
        """MSCCLang's switch tuple (msccl/topologies/topology.py): the sending ranks, the receiving ranks, the
        shared bandwidth, the name."""
        return (sorted({s for s, _ in self.links}), sorted({d for _, d in self.links}), self.bandwidth, self.name)

    # A switch reads as MSCCLang's tuple: `for srcs, dsts, bw, name in topology.switches`, `switch[2]`.
    def __iter__(self) -> Iterator[Any]:
        return iter(self.msccl_tuple())

    def __getitem__(self, index: int) -> Any:
        return self.msccl_tuple()[index]

    def __len__(self) -> int:
        return 4


@dataclass(frozen=True)
class Topology:
    """The topology of every stage, and MSCCLang's `Topology` (msccl.topologies): besides our fields it answers
    MSCCLang's attributes and methods with MSCCLang's meaning (`links` is the bandwidth matrix `links[dst][src]`,
    `switches` read as `(srcs, dsts, bandwidth, name)` tuples, `num_nodes()` is the rank count, `nodes()` the
    ranks, `link(src, dst)` the bandwidth number, 0 for none; `sources`, `destinations`, `bandwidth_constraints`),
    and `Topology(name, matrix, switches)` builds one from MSCCLang's matrix and switch tuples. collsynth's own
    directed links, with their alpha-beta costs, are `link_list`. Machines (multi-node) are `machines` /
    `num_machines`."""

    name: str
    num_ranks: int
    link_list: tuple[Link, ...] = ()
    switches: tuple[Switch, ...] = ()
    # Node index of each rank, for multi-node topologies; None means one node.
    machines: tuple[int, ...] | None = None
    # Ranks that share each NIC (for sketches / NIC-aware encodings); empty when unknown.
    nics: tuple[tuple[int, ...], ...] = ()
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.num_ranks, int):  # MSCCLang's Topology(name, links_matrix, switches)
            self._from_msccl_matrix(self.num_ranks, self.link_list)
        if self.num_ranks < 1:
            raise TopologyError(f"topology {self.name!r}: needs at least 1 rank, got {self.num_ranks}")
        seen: set[tuple[int, int]] = set()
        for link in self.link_list:
            if not (0 <= link.src < self.num_ranks and 0 <= link.dst < self.num_ranks):
                raise TopologyError(f"topology {self.name!r}: link {link.src}->{link.dst} names a rank outside "
                                    f"0..{self.num_ranks - 1}")
            if link.src == link.dst:
                raise TopologyError(f"topology {self.name!r}: self-link on rank {link.src}; remove it")
            if link.bandwidth < 1:
                raise TopologyError(f"topology {self.name!r}: link {link.src}->{link.dst} has bandwidth "
                                    f"{link.bandwidth}; use an integer >= 1 or omit the link")
            if (link.src, link.dst) in seen:
                raise TopologyError(f"topology {self.name!r}: link {link.src}->{link.dst} is listed twice; "
                                    "merge them into one link with the summed bandwidth")
            seen.add((link.src, link.dst))
        for switch in self.switches:
            missing = sorted(set(switch.links) - seen)
            if missing:
                raise TopologyError(f"topology {self.name!r}: switch {switch.name!r} names links {missing[:3]} "
                                    "that the topology does not have")
        if self.machines is not None and len(self.machines) != self.num_ranks:
            raise TopologyError(f"topology {self.name!r}: 'nodes' has {len(self.machines)} entries for "
                                f"{self.num_ranks} ranks")

    def _from_msccl_matrix(self, matrix: Any, msccl_switches: Any) -> None:
        """Fill the fields from MSCCLang's constructor arguments (links[dst][src] = bandwidth)."""
        rows = [list(row) for row in matrix]
        if any(len(row) != len(rows) for row in rows):
            raise TopologyError(f"topology {self.name!r}: the link matrix must be square (links[dst][src])")
        links = tuple(Link(src, dst, int(bw)) for dst, row in enumerate(rows) for src, bw in enumerate(row)
                      if bw and src != dst)
        present = {(x.src, x.dst) for x in links}
        switches = []
        for srcs, dsts, bw, name in msccl_switches:
            if bw <= 0:
                raise TopologyError(f"switch {name}: bandwidth {bw}; switch bandwidths must be strictly positive "
                                    "(encode connectedness in the links)")
            pairs = frozenset((s, d) for s in srcs for d in dsts if (s, d) in present)
            switches.append(Switch(str(name), pairs, int(bw)))
        object.__setattr__(self, "num_ranks", len(rows))
        object.__setattr__(self, "link_list", links)
        object.__setattr__(self, "switches", tuple(switches))

    # --- MSCCLang's Topology methods (msccl/topologies/topology.py), with its meaning -------------
    @cached_property
    def links(self) -> tuple[tuple[int, ...], ...]:
        """MSCCLang's bandwidth matrix: `links[dst][src]` is the bandwidth from src to dst, 0 for no link (rows
        are tuples: a Topology does not change; build a new one from an edited copy)."""
        rows = [[0] * self.num_ranks for _ in range(self.num_ranks)]
        for link in self.link_list:
            rows[link.dst][link.src] = link.bandwidth
        return tuple(tuple(row) for row in rows)

    def num_nodes(self) -> int:
        """MSCCLang: the number of ranks (GPUs), not machines (that is `num_machines`)."""
        return self.num_ranks

    def nodes(self) -> range:
        """MSCCLang: the ranks."""
        return range(self.num_ranks)

    def link(self, src: int, dst: int) -> int:
        """MSCCLang: the bandwidth from src to dst (chunks per round), 0 when there is no link."""
        return self.bandwidth(src, dst)

    def sources(self, dst: int) -> Iterator[int]:
        """MSCCLang: the ranks with a link into `dst`, in rank order."""
        return iter(self.in_neighbors[dst])

    def destinations(self, src: int) -> Iterator[int]:
        """MSCCLang: the ranks `src` has a link to, in rank order."""
        return iter(self.out_neighbors[src])

    def bandwidth_constraints(self) -> Iterator[tuple[Sequence[int], Sequence[int], int, str]]:
        """MSCCLang: one `([src], [dst], bandwidth, 'src→dst')` per link (by destination, then source), then
        one `(srcs, dsts, bandwidth, name)` per switch."""
        for link in sorted(self.link_list, key=lambda x: (x.dst, x.src)):
            yield [link.src], [link.dst], link.bandwidth, f"{link.src}\u2192{link.dst}"
        yield from (switch.msccl_tuple() for switch in self.switches)

    # --- lookups -------------------------------------------------------------------------------
    @cached_property
    def link_map(self) -> Mapping[tuple[int, int], Link]:
        return {(link.src, link.dst): link for link in self.link_list}

    def link_between(self, src: int, dst: int) -> Link | None:
        return self.link_map.get((src, dst))

    def has_link(self, src: int, dst: int) -> bool:
        return (src, dst) in self.link_map

    def bandwidth(self, src: int, dst: int) -> int:
        link = self.link_map.get((src, dst))
        return link.bandwidth if link else 0

    @cached_property
    def out_neighbors(self) -> tuple[tuple[int, ...], ...]:
        out: list[list[int]] = [[] for _ in range(self.num_ranks)]
        for link in self.link_list:
            out[link.src].append(link.dst)
        return tuple(tuple(sorted(x)) for x in out)

    @cached_property
    def in_neighbors(self) -> tuple[tuple[int, ...], ...]:
        inn: list[list[int]] = [[] for _ in range(self.num_ranks)]
        for link in self.link_list:
            inn[link.dst].append(link.src)
        return tuple(tuple(sorted(x)) for x in inn)

    def node_of(self, rank: int) -> int:
        return 0 if self.machines is None else self.machines[rank]

    @property
    def num_machines(self) -> int:
        return 1 if self.machines is None else len(set(self.machines))

    def graph(self) -> nx.DiGraph:
        """A networkx view (edge attributes are the link's fields)."""
        g = nx.DiGraph()
        g.add_nodes_from(range(self.num_ranks))
        for link in self.link_list:
            g.add_edge(link.src, link.dst, bandwidth=link.bandwidth, alpha_us=link.alpha_us,
                       beta_us_per_mb=link.beta_us_per_mb, kind=link.kind)
        return g

    @cached_property
    def distances(self) -> tuple[tuple[float, ...], ...]:
        """Hop distance between every pair of ranks (inf when unreachable)."""
        lengths = dict(nx.all_pairs_shortest_path_length(self.graph()))
        inf = float("inf")
        return tuple(tuple(lengths[s].get(d, inf) for d in range(self.num_ranks)) for s in range(self.num_ranks))

    # --- identity and serialization -------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "num_ranks": self.num_ranks,
            "links": [
                {"src": link.src, "dst": link.dst, "bandwidth": link.bandwidth, "alpha_us": link.alpha_us,
                 "beta_us_per_mb": link.beta_us_per_mb, "kind": link.kind}
                for link in self.link_list
            ],
            "switches": [
                {"name": sw.name, "links": sorted([list(x) for x in sw.links]), "bandwidth": sw.bandwidth,
                 "beta_us_per_mb": sw.beta_us_per_mb}
                for sw in self.switches
            ],
            "nodes": list(self.machines) if self.machines is not None else None,
            "nics": [list(nic) for nic in self.nics],
            "description": self.description,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], label: str = "topology") -> Topology:
        """A topology from its JSON document, validated against the declared schema (topologies/schema.py):
        exact types, finite non-negative costs, no unknown keys, ranks and links within the caps."""
        from collsynth.topologies.schema import check_topology_dict

        doc = check_topology_dict(data, label, TopologyError)
        links = tuple(
            Link(x.src, x.dst, x.bandwidth, NVLINK_ALPHA_US if x.alpha_us is None else x.alpha_us,
                 NVLINK_BETA_US_PER_MB if x.beta_us_per_mb is None else x.beta_us_per_mb, x.kind)
            for x in doc.links
        )
        switches = tuple(
            Switch(s.name, frozenset((a, b) for a, b in s.links), s.bandwidth,
                   NVLINK_BETA_US_PER_MB if s.beta_us_per_mb is None else s.beta_us_per_mb)
            for s in doc.switches
        )
        return cls(name=doc.name, num_ranks=doc.num_ranks, link_list=links, switches=switches,
                   machines=tuple(doc.nodes) if doc.nodes is not None else None,
                   nics=tuple(tuple(nic) for nic in doc.nics), description=doc.description)

    def fingerprint(self) -> str:
        """A stable hash of everything that affects algorithms (not the name or description)."""
        data = self.to_dict()
        data.pop("name")
        data.pop("description")
        data["links"].sort(key=lambda x: (x["src"], x["dst"]))
        data["switches"].sort(key=lambda x: (x["links"], x["bandwidth"]))
        for sw in data["switches"]:
            sw.pop("name")
        blob = json.dumps(data, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def __str__(self) -> str:
        return (f"Topology({self.name}, {self.num_ranks} ranks, {len(self.link_list)} links, "
                f"{len(self.switches)} switches)")


def links_from_matrix(matrix: Iterable[Iterable[int]], *, alpha_us: float = NVLINK_ALPHA_US,
                      beta_us_per_mb: float = NVLINK_BETA_US_PER_MB, kind: str = "nvlink") -> tuple[Link, ...]:
    """Links from an adjacency matrix of link counts; a pair with k parallel links gets bandwidth k and
    k times the per-link bandwidth (beta / k) under the alpha-beta model."""
    links = []
    for src, row in enumerate(matrix):
        for dst, count in enumerate(row):
            if count:
                links.append(Link(src, dst, int(count), alpha_us, beta_us_per_mb / count, kind))
    return tuple(links)
