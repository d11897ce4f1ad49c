"""Topology JSON files: our schema (`Topology.to_dict`, see docs/formats.md) and TACCL topology profiles.

`resolve_topology(spec)` is what every command-line option that names a topology goes through: a
built-in name (`ring:8`, `2xndv2`), a path to a JSON file, or `N x path` for N nodes of the file's
topology (a TACCL profile's own multi-node model, or our composition through NICs for our schema).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from collsynth.core.caps import LINKS, RANKS
from collsynth.core.files import read_json_file, write_atomic
from collsynth.topologies.library import IB_EDR, builtin, multi_node
from collsynth.topologies.model import Topology, TopologyError

_MULTI_NODE_FILE = re.compile(r"(\d+)\s*[x*]\s*(\S.*)", re.IGNORECASE)


def _is_taccl_profile(data: dict[str, Any]) -> bool:
    return "num_ranks" not in data and any(
        key in data for key in ("gpus_per_node", "node_invbws_list", "node_betas_list", "remote_invbw"))


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists() and not path.is_symlink():
        raise TopologyError(f"{path}: no such file; give a built-in name (collsynth topo list) or an existing "
                            "JSON file")
    data = read_json_file(path, TopologyError, "the topology")
    if not isinstance(data, dict):
        raise TopologyError(f"{path}: a topology file holds one JSON object (num_ranks, links, ...); "
                            "see docs/formats.md")
    return data


def _from_taccl(data: dict[str, Any], path: Path, num_nodes: int | None) -> Topology:
    try:
        from collsynth.topologies.taccl import load_taccl_profile
    except ImportError as exc:
        raise TopologyError(f"{path}: looks like a TACCL profile but the TACCL importer is unavailable "
                            f"({exc})") from None
    from collsynth.topologies.schema import check_taccl_dict

    profile = check_taccl_dict(data, str(path), TopologyError)
    total = profile.gpus_per_node * (num_nodes if num_nodes is not None else profile.nnodes or 1)
    RANKS.check(total, f"{path}: ranks of the multi-node topology", TopologyError)
    LINKS.check(total * (total - 1), f"{path}: links of the multi-node topology (every GPU to every remote GPU)")
    name = str(data.get("name") or path.stem)
    try:
        if num_nodes is None:
            return load_taccl_profile(data, name=name)
        return load_taccl_profile(data, name=name, num_nodes=num_nodes)
    except TopologyError as exc:
        raise TopologyError(f"{path}: {exc}") from None


def load_topology(path: str | os.PathLike[str], *, num_nodes: int | None = None) -> Topology:
    """A topology from a JSON file: our schema, or a TACCL topology profile (detected by its keys).

    `num_nodes` asks for that many nodes: a TACCL profile builds them itself, our schema is composed
    with `multi_node` (InfiniBand EDR through the topology's NICs)."""
    path = Path(path)
    data = _read_json(path)
    if _is_taccl_profile(data):
        return _from_taccl(data, path, num_nodes)
    missing = [key for key in ("num_ranks", "links") if key not in data]
    if missing:
        raise TopologyError(f"{path}: missing field {missing[0]!r}; a topology file needs num_ranks and links "
                            "(or is a TACCL profile with gpus_per_node, alpha, node_betas_list); see docs/formats.md")
    try:
        topo = Topology.from_dict(data, label=str(path))
    except TopologyError as exc:  # the schema's messages start with the path; the model's checks do not
        raise TopologyError(exc.args[0] if str(exc).startswith(str(path)) else f"{path}: {exc}") from None
    if num_nodes is not None:
        topo = multi_node(topo, num_nodes, IB_EDR)
    return topo


def save_topology(topo: Topology, path: str | os.PathLike[str]) -> None:
    """Write `topo` in our schema, atomically (a temp file in the same folder, then rename)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise TopologyError(f"{path}: folder {folder} does not exist; create it first")
    text = json.dumps(topo.to_dict(), indent=1) + "\n"
    write_atomic(path, text)


def resolve_topology(spec: str) -> Topology:
    """A built-in name (`ring:8`, `2xndv2`), a path to a JSON file (ours or a TACCL profile), or
    `Nx<path>` for N nodes of that file's topology."""
    text = spec.strip()
    if not text:
        raise TopologyError("empty topology name; give a built-in (collsynth topo list) or a JSON file")
    if Path(text).exists() and not Path(text).is_dir():  # a file, or a special file the reader refuses
        return load_topology(text)
    multi = _MULTI_NODE_FILE.fullmatch(text)
    if multi and Path(multi.group(2)).is_file():
        return load_topology(multi.group(2), num_nodes=int(multi.group(1)))
    if text.lower().endswith(".json"):
        raise TopologyError(f"{text}: no such file; give a built-in name (collsynth topo list) or an existing "
                            "JSON file")
    return builtin(text)
