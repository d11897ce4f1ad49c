"""Questions asked of a catalog: which verified entry is fastest for a topology, collective and size."""

from __future__ import annotations

from dataclasses import dataclass

from collsynth.catalog.db import Catalog, EntryRow
from collsynth.catalog.errors import CatalogError
from collsynth.collectives import canonical_name
from collsynth.core.errors import CollsynthError
from collsynth.topologies import Topology, resolve_topology


@dataclass(frozen=True)
class Ranked:
    """One candidate's predicted time at the asked size; `simulated` when the size was not on the stored grid
    and the entry's XML was simulated at exactly that size."""

    entry: EntryRow
    size_bytes: int
    time_us: float
    busbw_GBps: float
    simulated: bool


def find_topology(catalog: Catalog, spec: str) -> tuple[str, Topology]:
    """(fingerprint, topology) for a built-in name or JSON file, or the name of a topology in the catalog."""
    try:
        topology = resolve_topology(spec)
        return topology.fingerprint(), topology
    except CollsynthError as exc:
        for fingerprint, name in catalog.topologies():
            if name == spec:
                return fingerprint, catalog.topology(fingerprint)
        raise CatalogError(f"{exc} (and no topology named {spec!r} in {catalog.path})") from None


def rank_entries(catalog: Catalog, topology_spec: str, collective: str, size_bytes: int, *, dtype: str = "float32",
                 inplace: bool | None = None) -> list[Ranked]:
    """Verified entries for (topology, collective), fastest first, at `size_bytes` (nccl-tests size)."""
    from collsynth.catalog.pipeline import simulate_points
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.sim import dtype_info

    fingerprint, topology = find_topology(catalog, topology_spec)
    coll = canonical_name(collective)
    type_name = dtype_info(dtype)[0]
    entries = [e for e in catalog.entries(fingerprint=fingerprint, collective=coll, status="ok")
               if inplace is None or e.variant.inplace == inplace]
    if not entries:
        have = sorted({e.collective for e in catalog.entries(fingerprint=fingerprint, status="ok")})
        hint = f"it has {', '.join(have)} for this topology" if have else "it has no entries for this topology"
        raise CatalogError(f"{catalog.path}: no verified {coll} entries for {topology.name} ({hint}); add them to a "
                           "plan and run `collsynth catalog build`")
    ranked = []
    for entry in entries:
        stored = [p for p in catalog.times(entry.id, type_name)
                  if size_bytes in (p.requested_bytes, p.size_bytes)]
        if stored:
            point, simulated = stored[0], False
        else:
            point = simulate_points(read_xml(catalog.xml_text(entry)), topology, [size_bytes], type_name)[0]
            simulated = True
        ranked.append(Ranked(entry, point.size_bytes, point.time_us, point.busbw_GBps, simulated))
    ranked.sort(key=lambda r: (r.time_us, r.entry.name, r.entry.id))
    return ranked


def with_tuned_times(ranked: list[Ranked]) -> tuple[list[Ranked], list[str]]:
    """The ranking by what each entry would really run at that size: the faster of its compiled variant and
    its tuned configuration there (collsynth.tune; out-of-place entries at grid sizes), re-sorted; and per
    row how it is compiled ("tuned <configuration>" or the variant)."""
    from dataclasses import replace

    from collsynth.catalog.select import tuned_record

    rows = []
    for r in ranked:
        record = None if r.entry.variant.inplace else tuned_record(r.entry.provenance, r.size_bytes)
        if record is not None and float(record["time_us"]) < r.time_us:
            rows.append((replace(r, time_us=float(record["time_us"]), busbw_GBps=float(record["busbw_GBps"])),
                         f"tuned {record.get('config_key', '')}"))
        else:
            rows.append((r, str(r.entry.variant)))
    rows.sort(key=lambda rc: (rc[0].time_us, rc[0].entry.name, rc[0].entry.id))
    return [r for r, _ in rows], [c for _, c in rows]
