"""Communication sketches: which routes the MILP synthesizer may use (TACCL's idea, our own model).

A sketch restricts the search so that MILPs stay small:
- intra-node strategy: `free` (any link inside a node; TACCL's "none") or `switch` (the listed local
  ranks sit on a switch: each rank's port into and out of it carries one transfer at a time, and the
  `connections` policy asks for few (`min`, TACCL's uc-min) or many (`max`, uc-max) distinct links);
- inter-node strategy `relay`: chunks cross nodes only on the listed (local sender -> local receiver)
  connections (`direct`: i -> i, `all`: every pair, or explicit pairs), optionally only through the
  sender assigned to the chunk's source GPU (`senders`, TACCL's gpus_to_sender_rev_map), with that
  sender's own chunks first (`senders_first`, TACCL's enforce_ordering); inter-node chunks that share
  a link may be sent together (up to `max_together`) to pay alpha once;
- symmetry: (offset, group) pairs; rank r maps to (r % group + offset) % group + (r // group) * group.
  The schedule is required to be invariant under these rank rotations (the MILP shrinks accordingly);
- `chunkup`: each rank's data is split into this many chunks;
- `routes`: `any` (any sketched link between ranks on minimum-hop paths from a chunk's source to its
  destinations, as TACCL's shortest-path sets; the default, `auto`) or `shortest` (only links on those
  minimum-hop paths: smaller MILPs, sometimes slower schedules).

Two JSON formats are read: TACCL's sketch JSON (examples/taccl/sketch) and ours (`to_dict`,
docs/formats.md "Communication sketches"); `taccl_to_dict` / `sketch_from_taccl` convert.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from collsynth.core.caps import CHUNKS_PER_RANK, RANKS
from collsynth.core.errors import CollsynthError
from collsynth.core.files import read_json_file
from collsynth.topologies import Topology

SKETCH_FORMAT = "collsynth.sketch/1"
INTRA_STRATEGIES = ("free", "switch")
CONNECTION_POLICIES = ("min", "max", "any")
ROUTE_POLICIES = ("auto", "shortest", "any")
_TACCL_POLICY = {"uc-min": "min", "uc-max": "max"}
_TACCL_CONN = {"direct-map": "direct", "fully-connected": "all"}


class SketchError(CollsynthError):
    """A malformed sketch, or one that does not fit the topology or makes the collective impossible."""


@dataclass(frozen=True)
class SwitchSketch:
    """Local ranks (0..gpus_per_node-1) on one switch, and how many distinct links to prefer."""
    ranks: tuple[int, ...]
    connections: str = "any"


@dataclass(frozen=True)
class Sketch:
    num_nodes: int = 1
    chunkup: int = 1
    intra_strategy: str = "free"
    switches: tuple[SwitchSketch, ...] = ()
    # None: no inter-node traffic allowed (single node); "relay": through `connections` only.
    inter_strategy: str | None = None
    # "direct" (i -> i), "all" (every local pair) or explicit (local sender, local receiver) pairs.
    connections: str | tuple[tuple[int, int], ...] = "all"
    # (sender, local GPUs whose chunks it sends to other nodes); empty: any connected sender.
    senders: tuple[tuple[int, tuple[int, ...]], ...] = ()
    senders_first: bool = False
    max_together: int = 6
    symmetry: tuple[tuple[int, int], ...] = ()
    routes: str = "auto"
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.num_nodes < 1:
            raise SketchError(f"sketch field 'nodes': must be >= 1, got {self.num_nodes}")
        if self.chunkup < 1:
            raise SketchError(f"sketch field 'chunkup': must be >= 1, got {self.chunkup}")
        CHUNKS_PER_RANK.check(self.chunkup, "sketch field 'chunkup'", SketchError)
        RANKS.check(self.num_nodes, "sketch field 'nodes'", SketchError)
        if self.intra_strategy not in INTRA_STRATEGIES:
            raise SketchError(f"sketch field 'intra_node.strategy': unknown strategy {self.intra_strategy!r}; "
                              f"use one of {', '.join(INTRA_STRATEGIES)}")
        if self.intra_strategy == "switch" and not self.switches:
            raise SketchError("sketch field 'intra_node.switches': the switch strategy needs at least one switch")
        for sw in self.switches:
            if sw.connections not in CONNECTION_POLICIES:
                raise SketchError(f"sketch field 'intra_node.switches[].connections': unknown policy "
                                  f"{sw.connections!r}; use min, max or any")
            if len(sw.ranks) < 2 or len(set(sw.ranks)) != len(sw.ranks):
                raise SketchError(f"sketch field 'intra_node.switches[].ranks': {list(sw.ranks)} needs >= 2 "
                                  "distinct local ranks")
        if self.inter_strategy not in (None, "relay"):
            raise SketchError(f"sketch field 'inter_node.strategy': unknown strategy {self.inter_strategy!r}; "
                              "use relay")
        if isinstance(self.connections, str) and self.connections not in ("direct", "all"):
            raise SketchError(f"sketch field 'inter_node.connections': unknown value {self.connections!r}; use "
                              "direct, all or a list of [sender, receiver] pairs")
        if self.max_together < 1:
            raise SketchError(f"sketch field 'inter_node.max_together': must be >= 1, got {self.max_together}")
        if self.routes not in ROUTE_POLICIES:
            raise SketchError(f"sketch field 'routes': unknown policy {self.routes!r}; use auto, shortest or any")
        for offset, size in self.symmetry:
            if size < 1 or offset < 0:
                raise SketchError(f"sketch field 'symmetry': [offset {offset}, group {size}] needs offset >= 0 "
                                  "and group >= 1")

    # --- derived --------------------------------------------------------------------------------
    @property
    def route_policy(self) -> str:
        """`shortest` or `any` (`auto` means `any`, TACCL's choice)."""
        return "any" if self.routes == "auto" else self.routes

    def connection_pairs(self, gpus_per_node: int) -> tuple[tuple[int, int], ...]:
        """The (local sender, local receiver) pairs that may carry inter-node traffic."""
        if self.connections == "direct":
            return tuple((g, g) for g in range(gpus_per_node))
        if self.connections == "all":
            return tuple((s, r) for s in range(gpus_per_node) for r in range(gpus_per_node))
        return tuple(self.connections)  # type: ignore[arg-type]

    def senders_of(self, local_gpu: int) -> tuple[int, ...] | None:
        """The local senders allowed to carry `local_gpu`'s chunks off the node (None: any)."""
        if not self.senders:
            return None
        return tuple(s for s, gpus in self.senders if local_gpu in gpus)

    def check(self, topology: Topology) -> int:
        """Check the sketch against a topology; return gpus per node. Raises SketchError naming the field."""
        n = topology.num_ranks
        if topology.num_machines != self.num_nodes:
            raise SketchError(f"sketch field 'nodes': the sketch is for {self.num_nodes} node(s) but topology "
                              f"{topology.name!r} has {topology.num_machines}; use a {self.num_nodes}-node topology "
                              f"(e.g. {self.num_nodes}x<topology>)")
        if n % self.num_nodes:
            raise SketchError(f"sketch field 'nodes': {n} ranks do not split into {self.num_nodes} equal nodes")
        gpus = n // self.num_nodes
        if topology.machines is not None and tuple(topology.machines) != tuple(r // gpus for r in range(n)):
            raise SketchError(f"topology {topology.name!r}: nodes must be contiguous blocks of {gpus} ranks for "
                              "a sketch (node k = ranks k*g .. k*g+g-1)")
        for sw in self.switches:
            bad = [r for r in sw.ranks if not 0 <= r < gpus]
            if bad:
                raise SketchError(f"sketch field 'intra_node.switches[].ranks': local rank {bad[0]} is outside "
                                  f"0..{gpus - 1}")
            for a in sw.ranks:
                for b in sw.ranks:
                    if a != b and not topology.has_link(a, b):
                        raise SketchError(f"sketch field 'intra_node.switches': ranks {a} and {b} are on one switch "
                                          f"but topology {topology.name!r} has no link {a}->{b}")
        if self.num_nodes > 1:
            self._check_inter_node(topology, gpus)
        if self.senders_first and not self.senders:
            raise SketchError("sketch field 'inter_node.senders_first' (enforce_ordering) needs 'senders' "
                              "(gpus_to_sender_rev_map)")
        for offset, size in self.symmetry:
            if n % size:
                raise SketchError(f"sketch field 'symmetry': group size {size} does not divide {n} ranks")
            if offset >= size:
                raise SketchError(f"sketch field 'symmetry': offset {offset} must be smaller than group size {size}")
        return gpus

    def _check_inter_node(self, topology: Topology, gpus: int) -> None:
        """The inter-node part of `check`: strategy, connections and senders."""
        if self.inter_strategy is None:
            raise SketchError("sketch field 'inter_node': a multi-node sketch needs an inter-node strategy "
                              "(relay)")
        pairs = self.connection_pairs(gpus)
        if not pairs:
            raise SketchError("sketch field 'inter_node.connections': no connections; list at least one "
                              "[sender, receiver] pair")
        for s, r in pairs:
            if not (0 <= s < gpus and 0 <= r < gpus):
                raise SketchError(f"sketch field 'inter_node.connections': pair [{s}, {r}] names a local rank "
                                  f"outside 0..{gpus - 1}")
            if not topology.has_link(s, gpus + r):
                raise SketchError(f"sketch field 'inter_node.connections': topology {topology.name!r} has no "
                                  f"link from rank {s} to rank {gpus + r} (node 0 -> node 1)")
        senders = {s for s, _ in pairs}
        covered: set[int] = set()
        for s, gpus_of in self.senders:
            if s not in senders:
                raise SketchError(f"sketch field 'inter_node.senders': GPU {s} is a sender but has no "
                                  "inter-node connection")
            bad = [g for g in gpus_of if not 0 <= g < gpus]
            if bad:
                raise SketchError(f"sketch field 'inter_node.senders': local rank {bad[0]} is outside "
                                  f"0..{gpus - 1}")
            covered.update(gpus_of)
        if self.senders and len(covered) != gpus:
            missing = sorted(set(range(gpus)) - covered)
            raise SketchError(f"sketch field 'inter_node.senders': GPUs {missing} have no sender, so their "
                              "chunks cannot leave the node; map every GPU to a sender")

    # --- serialization --------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """Our own JSON format (docs/formats.md, "Communication sketches")."""
        data: dict[str, Any] = {"format": SKETCH_FORMAT}
        if self.name:
            data["name"] = self.name
        data["nodes"] = self.num_nodes
        data["chunkup"] = self.chunkup
        data["routes"] = self.routes
        intra: dict[str, Any] = {"strategy": self.intra_strategy}
        if self.switches:
            intra["switches"] = [{"ranks": list(sw.ranks), "connections": sw.connections} for sw in self.switches]
        data["intra_node"] = intra
        if self.inter_strategy is not None:
            inter: dict[str, Any] = {"strategy": self.inter_strategy}
            inter["connections"] = (self.connections if isinstance(self.connections, str)
                                    else [list(p) for p in self.connections])
            if self.senders:
                inter["senders"] = {str(s): list(g) for s, g in self.senders}
            inter["senders_first"] = self.senders_first
            inter["max_together"] = self.max_together
            data["inter_node"] = inter
        data["symmetry"] = [{"offset": o, "group": s} for o, s in self.symmetry]
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Sketch:
        """A sketch from our JSON format or TACCL's (recognized by its `intranode_sketch` key)."""
        if not isinstance(data, Mapping):
            raise SketchError("a sketch JSON file holds one object; see docs/formats.md")
        if "intranode_sketch" in data or "internode_sketch" in data:
            return sketch_from_taccl(data)
        from collsynth.encodings.sketch_schema import check_sketch_document  # pydantic: only when a file is read

        check_sketch_document(data, SketchError, taccl=False)  # the declared schema: types, ranges, keys
        fmt = data.get("format", SKETCH_FORMAT)
        if fmt != SKETCH_FORMAT:
            raise SketchError(f"sketch field 'format': unknown format {fmt!r}; expected {SKETCH_FORMAT!r}")
        known = {"format", "name", "nodes", "chunkup", "routes", "intra_node", "inter_node", "symmetry"}
        _no_unknown(data, known, "")
        intra = _mapping(data.get("intra_node", {}), "intra_node")
        _no_unknown(intra, {"strategy", "switches"}, "intra_node.")
        switches = tuple(
            SwitchSketch(_int_tuple(_mapping(sw, "intra_node.switches[]").get("ranks"), "intra_node.switches[].ranks"),
                         str(sw.get("connections", "any")))
            for sw in _list(intra.get("switches", []), "intra_node.switches")
        )
        inter_raw = data.get("inter_node")
        kwargs: dict[str, Any] = {}
        if inter_raw is not None:
            inter = _mapping(inter_raw, "inter_node")
            _no_unknown(inter, {"strategy", "connections", "senders", "senders_first", "max_together"},
                        "inter_node.")
            conns = inter.get("connections", "all")
            kwargs["inter_strategy"] = str(inter.get("strategy", "relay"))
            kwargs["connections"] = conns if isinstance(conns, str) else _pairs(conns, "inter_node.connections")
            kwargs["senders"] = _senders(inter.get("senders", {}), "inter_node.senders")
            kwargs["senders_first"] = _bool(inter.get("senders_first", False), "inter_node.senders_first")
            kwargs["max_together"] = _int(inter.get("max_together", 6), "inter_node.max_together")
        symmetry = tuple(
            (_int(_mapping(s, "symmetry[]").get("offset"), "symmetry[].offset"),
             _int(s.get("group"), "symmetry[].group"))
            for s in _list(data.get("symmetry", []), "symmetry")
        )
        return cls(num_nodes=_int(data.get("nodes", 1), "nodes"), chunkup=_int(data.get("chunkup", 1), "chunkup"),
                   intra_strategy=str(intra.get("strategy", "free")), switches=switches, symmetry=symmetry,
                   routes=str(data.get("routes", "auto")), name=str(data.get("name", "")), **kwargs)

    def __str__(self) -> str:
        parts = [f"{self.num_nodes} node(s)", f"chunkup {self.chunkup}", f"intra {self.intra_strategy}"]
        if self.inter_strategy:
            conns = self.connections if isinstance(self.connections, str) else f"{len(self.connections)} pairs"
            parts.append(f"inter {self.inter_strategy} ({conns})")
        if self.symmetry:
            parts.append("symmetry " + ",".join(f"{o}/{s}" for o, s in self.symmetry))
        return f"Sketch({self.name or 'unnamed'}: {', '.join(parts)}, routes {self.route_policy})"


# --- TACCL's format ----------------------------------------------------------------------------

def sketch_from_taccl(data: Mapping[str, Any], *, name: str = "") -> Sketch:
    """Convert TACCL's sketch JSON (nnodes, intranode_sketch, internode_sketch, symmetry_offsets,
    hyperparameters.input_chunkup) to a Sketch."""
    if not isinstance(data, Mapping):
        raise SketchError("a TACCL sketch JSON file holds one object")
    from collsynth.encodings.sketch_schema import check_sketch_document

    check_sketch_document(data, SketchError, taccl=True)
    _no_unknown(data, {"nnodes", "intranode_sketch", "internode_sketch", "symmetry_offsets", "hyperparameters"}, "")
    intra = _mapping(data.get("intranode_sketch", {"strategy": "none"}), "intranode_sketch")
    strategy = intra.get("strategy", "none")
    switches: tuple[SwitchSketch, ...] = ()
    if strategy == "none":
        intra_strategy = "free"
    elif strategy == "switch":
        intra_strategy = "switch"
        ranks = _list(intra.get("switches"), "intranode_sketch.switches")
        policies = _list(intra.get("switch_hyperedge_strategy", ["uc-max"] * len(ranks)),
                         "intranode_sketch.switch_hyperedge_strategy")
        if len(policies) != len(ranks):
            raise SketchError(f"sketch field 'intranode_sketch.switch_hyperedge_strategy': {len(policies)} entries "
                              f"for {len(ranks)} switches; give one per switch")
        sws = []
        for sw_ranks, policy in zip(ranks, policies, strict=True):
            if policy not in _TACCL_POLICY:
                raise SketchError(f"sketch field 'intranode_sketch.switch_hyperedge_strategy': unknown policy "
                                  f"{policy!r}; use uc-min or uc-max")
            sws.append(SwitchSketch(_int_tuple(sw_ranks, "intranode_sketch.switches"), _TACCL_POLICY[policy]))
        switches = tuple(sws)
    else:
        raise SketchError(f"sketch field 'intranode_sketch.strategy': unknown strategy {strategy!r}; use none or "
                          "switch")
    kwargs: dict[str, Any] = {}
    inter_raw = data.get("internode_sketch")
    if inter_raw is not None:
        inter = _mapping(inter_raw, "internode_sketch")
        if inter.get("strategy", "relay") != "relay":
            raise SketchError(f"sketch field 'internode_sketch.strategy': unknown strategy {inter.get('strategy')!r}; "
                              "use relay")
        kwargs["inter_strategy"] = "relay"
        conn = inter.get("internode_conn", "fully-connected")
        if isinstance(conn, str):
            if conn not in _TACCL_CONN:
                raise SketchError(f"sketch field 'internode_sketch.internode_conn': unknown value {conn!r}; use "
                                  "direct-map, fully-connected or a map {sender: [receivers]}")
            kwargs["connections"] = _TACCL_CONN[conn]
        else:
            conn_map = _mapping(conn, "internode_sketch.internode_conn")
            kwargs["connections"] = tuple(
                (_int(s, "internode_sketch.internode_conn"), r)
                for s, rs in conn_map.items() for r in _int_tuple(rs, "internode_sketch.internode_conn"))
        kwargs["senders"] = _senders(inter.get("gpus_to_sender_rev_map") or {},
                                     "internode_sketch.gpus_to_sender_rev_map")
        kwargs["senders_first"] = _bool(inter.get("enforce_ordering", False), "internode_sketch.enforce_ordering")
    offsets = tuple(_pair(x, "symmetry_offsets") for x in _list(data.get("symmetry_offsets", []), "symmetry_offsets"))
    hyper = _mapping(data.get("hyperparameters", {}), "hyperparameters")
    return Sketch(num_nodes=_int(data.get("nnodes", 1), "nnodes"),
                  chunkup=_int(hyper.get("input_chunkup", 1), "hyperparameters.input_chunkup"),
                  intra_strategy=intra_strategy, switches=switches, symmetry=offsets, name=name, **kwargs)


def taccl_to_dict(sketch: Sketch) -> dict[str, Any]:
    """The sketch in TACCL's JSON format (our `routes` and `max_together` have no TACCL equivalent)."""
    data: dict[str, Any] = {"nnodes": sketch.num_nodes}
    if sketch.intra_strategy == "free":
        data["intranode_sketch"] = {"strategy": "none"}
    else:
        inverse = {v: k for k, v in _TACCL_POLICY.items()}
        data["intranode_sketch"] = {
            "strategy": "switch",
            "switches": [list(sw.ranks) for sw in sketch.switches],
            "switch_hyperedge_strategy": [inverse.get(sw.connections, "uc-max") for sw in sketch.switches],
        }
    if sketch.inter_strategy is not None:
        inter: dict[str, Any] = {"strategy": "relay"}
        if isinstance(sketch.connections, str):
            inter["internode_conn"] = {v: k for k, v in _TACCL_CONN.items()}[sketch.connections]
        else:
            conn: dict[str, list[int]] = {}
            for s, r in sketch.connections:
                conn.setdefault(str(s), []).append(r)
            inter["internode_conn"] = conn
        if sketch.senders:
            inter["gpus_to_sender_rev_map"] = {str(s): list(g) for s, g in sketch.senders}
        if sketch.senders_first:
            inter["enforce_ordering"] = True
        data["internode_sketch"] = inter
    data["symmetry_offsets"] = [[o, s] for o, s in sketch.symmetry]
    data["hyperparameters"] = {"input_chunkup": sketch.chunkup}
    return data


def load_sketch(path: str | Path) -> Sketch:
    """A sketch from a JSON file in our format or TACCL's."""
    data = read_json_file(path, SketchError, "the sketch")
    try:
        sketch = Sketch.from_dict(data) if not _is_taccl(data) else sketch_from_taccl(data, name=Path(path).stem)
    except SketchError as exc:
        raise SketchError(f"{path}: {exc}") from None
    if not sketch.name:
        sketch = replace(sketch, name=Path(path).stem)
    return sketch


def _is_taccl(data: Any) -> bool:
    return isinstance(data, Mapping) and ("intranode_sketch" in data or "internode_sketch" in data)


# --- field readers that name the field on error --------------------------------------------------

def _no_unknown(data: Mapping[str, Any], known: set[str], prefix: str) -> None:
    extra = sorted(set(data) - known)
    if extra:
        raise SketchError(f"sketch field '{prefix}{extra[0]}': unknown field; known: {', '.join(sorted(known))}")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SketchError(f"sketch field '{where}': must be an object, got {value!r}")
    return value


def _list(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise SketchError(f"sketch field '{where}': must be a list, got {value!r}")
    return value


def _int(value: Any, where: str) -> int:
    if isinstance(value, bool):
        raise SketchError(f"sketch field '{where}': must be an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise SketchError(f"sketch field '{where}': must be an integer, got {value!r}")


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise SketchError(f"sketch field '{where}': must be true or false, got {value!r}")
    return value


def _int_tuple(value: Any, where: str) -> tuple[int, ...]:
    return tuple(_int(x, where) for x in _list(value, where))


def _pair(value: Any, where: str) -> tuple[int, int]:
    items = _int_tuple(value, where)
    if len(items) != 2:
        raise SketchError(f"sketch field '{where}': each entry must be a pair [a, b], got {value!r}")
    return items[0], items[1]


def _pairs(value: Any, where: str) -> tuple[tuple[int, int], ...]:
    return tuple(_pair(x, where) for x in _list(value, where))


def _senders(value: Any, where: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
    mapping = _mapping(value, where)
    return tuple(sorted((_int(s, where), _int_tuple(g, where)) for s, g in mapping.items()))
