"""The export plan of one (topology, collective, in-place kind): `ExportGroup`, made by export.py and read by
report.py (a module of its own so that neither imports the other)."""

from __future__ import annotations

from dataclasses import dataclass

from collsynth.catalog.db import EntryRow
from collsynth.catalog.results import SimPoint
from collsynth.catalog.select import TUNED_SEP, SizeRange, Winner, entry_of
from collsynth.topologies import Topology


@dataclass(frozen=True)
class ExportGroup:
    """The export plan of one (topology, collective, in-place kind): candidates, per-size winners, ranges."""

    topology: Topology
    fingerprint: str
    collective: str
    inplace: bool
    dtype: str
    candidates: tuple[EntryRow, ...]
    points: dict[str, tuple[SimPoint, ...]]  # candidate key (entry id, or ENTRY~XMLHASH when tuned) -> points
    winners: tuple[Winner, ...]
    ranges: tuple[SizeRange, ...]
    refused: tuple[str, ...] = ()  # candidates the target's loader would refuse: "name: why"

    def entry(self, key: str) -> EntryRow:
        """The entry of a candidate key (its own variant, or one of its tuned configurations)."""
        entry_id = entry_of(key)
        return next(entry for entry in self.candidates if entry.id == entry_id)

    def compile_label(self, key: str) -> str:
        """How the candidate is compiled: the entry's variant, or its tuned configuration (collsynth.tune)."""
        entry = self.entry(key)
        if TUNED_SEP not in key:
            return f"{entry.variant.protocol} x{entry.variant.instances}"
        digest = key.split(TUNED_SEP, 1)[1]
        records = entry.provenance.get("tuned") or []
        record = next(r for r in records if r.get("xml_sha256") == digest)
        return f"tuned {record.get('config_key', '')}"

    @property
    def slug(self) -> str:
        return f"{path_slug(self.topology.name)}-{self.collective}" + ("-inplace" if self.inplace else "")


def path_slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text).strip("_") or "topology"
