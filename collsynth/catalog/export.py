"""Export the catalog as MSCCL/RCCL algorithm directories, with a report of which algorithm wins where.

How the loaders pick an algorithm (msccl-executor-nccl and RCCL, `src/misc/msccl/msccl_lifecycle.cc`, and
the external msccl-scheduler; summarized in our words): at init the scheduler reads *every* regular file in
the directory named by `MSCCL_ALGO_DIR` (default: `msccl-algorithms/` next to libnccl.so / librccl.so; RCCL
also tries `../share/rccl/msccl-algorithms`) as an MSCCL-IR XML file; a file that does not parse fails the
init. For each call it takes the *first* file (directory order) whose `coll` and `ngpus` match, whose
`inplace` / `outofplace` flag matches the call, where count % nchunksperloop == 0, and where
minBytes <= count x element size x sizeMultiplier <= maxBytes (maxBytes 0: no upper limit;
sizeMultiplier is ngpus for allgather, reducescatter and alltoall). Otherwise the call falls back to NCCL.
So the ranges we write for one (collective, ngpus, in-place kind) never overlap, and each topology gets
its own directory (two topologies with the same rank count would otherwise compete). NCCL's
`NCCL_MSCCL_ENABLE` and RCCL's `RCCL_MSCCL_ENABLE` default to 1; RCCL's internal scheduler only runs
where RCCL enables MSCCL for the GPU unless `RCCL_MSCCL_FORCE_ENABLE=1`. The older microsoft/msccl loader
(`--target msccl-legacy`) instead takes at most 4 files from the colon-separated `MSCCL_XML_FILES` with
`NCCL_ALGO=MSCCL,RING,TREE` and selects minBytes <= size < maxBytes. Each export is written for one target
(collsynth.core.targets): its spellings, size rule, algorithm cap (the rest is reported, not written) and loader
limits (candidates it would refuse are skipped); `collsynth doctor DIR --target T` replays its loader.

Layout of an export directory:

    DIR/report.md                           which algorithm wins where (tables), how to load the export
    DIR/plots/<topology>-<coll>[-inplace].png   busbw vs size of the winners
    DIR/<topology>/msccl-algorithms/*.xml   the winners, minBytes/maxBytes set (only XML files in here)
    DIR/<topology>/msccl.env                the loader configuration: `source` it before running
    DIR/<topology>/manifest.json            the ranges, machine-readable

Export writes into a temporary directory beside DIR and renames it into place.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from collsynth.catalog.db import Catalog, EntryRow
from collsynth.catalog.errors import CatalogError
from collsynth.catalog.export_group import ExportGroup, path_slug
from collsynth.catalog.results import SimPoint
from collsynth.catalog.select import (
    TUNED_SEP,
    crossover,
    entry_of,
    size_granule,
    size_ranges,
    tuned_record,
    winners_per_size,
    with_tuned,
)
from collsynth.collectives import canonical_name, display_name
from collsynth.compiler.split import target_violation
from collsynth.core.files import current_umask, write_atomic
from collsynth.core.targets import DEFAULT_TARGET, get_target
from collsynth.core.units import format_size
from collsynth.ir import Algo
from collsynth.ir.deadlock import bounded_deadlock
from collsynth.topologies import Topology


@dataclass(frozen=True)
class ExportSummary:
    directory: Path
    groups: tuple[ExportGroup, ...]
    files: tuple[Path, ...]
    target: str = DEFAULT_TARGET
    left_out: tuple[str, ...] = ()  # files beyond the target's algorithm cap, not written

    def __str__(self) -> str:
        ranges = sum(len(group.ranges) for group in self.groups)
        text = (f"exported {ranges} size ranges for {len(self.groups)} (topology, collective) groups for "
                f"{self.target} to {self.directory}; see {self.directory / 'report.md'}")
        if self.left_out:
            text += (f"; {len(self.left_out)} range(s) left out: {self.target} loads at most "
                     f"{get_target(self.target).max_algorithms} algorithms ({', '.join(self.left_out)})")
        refused = sum(len(group.refused) for group in self.groups)
        if refused:
            text += f"; {refused} candidate(s) skipped that {self.target} cannot load (report.md)"
        return text


def plan_export(catalog: Catalog, *, topologies: Sequence[str] = (), collectives: Sequence[str] = (),
                dtype: str | None = None, target: str = DEFAULT_TARGET) -> list[ExportGroup]:
    """Per (topology, collective, in-place kind) among verified entries the target's runtime loads: winners per
    grid size and the size ranges with boundaries at the simulated crossovers."""
    type_name = _type_name(catalog, dtype)
    runtime = get_target(target)
    wanted_topologies = {t.lower() for t in topologies}
    wanted_collectives = {canonical_name(c) for c in collectives}
    groups: dict[tuple[str, str, bool], list[EntryRow]] = {}
    for entry in catalog.entries(status="ok"):
        if wanted_topologies and entry.topology.lower() not in wanted_topologies:
            continue
        if wanted_collectives and entry.collective not in wanted_collectives:
            continue
        groups.setdefault((entry.fingerprint, entry.collective, entry.variant.inplace), []).append(entry)
    if not groups:
        what = " matching the filters" if topologies or collectives else ""
        raise CatalogError(f"{catalog.path}: no verified entries{what} to export; build the catalog first "
                           "(collsynth catalog build PLAN)")
    out = []
    for (fingerprint, collective, inplace), entries in sorted(groups.items(), key=lambda kv: (kv[1][0].topology,
                                                                                                kv[0][1], kv[0][2])):
        points = {entry.id: tuple(catalog.times(entry.id, type_name)) for entry in entries}
        entries = [entry for entry in entries if points[entry.id]]
        refused = []
        for entry in list(entries):
            ir = _read_ir(catalog, entry)  # older catalogs were checked with unbounded FIFOs: check the slots here
            why = target_violation(ir, runtime) or bounded_deadlock(ir, runtime.fifo_slots)
            if why is not None:
                refused.append(f"{entry.name}: {why}")
                entries.remove(entry)
        if not entries:
            continue
        topology = catalog.topology(fingerprint)
        own = {entry.id: {p.size_bytes: p.time_us for p in points[entry.id]} for entry in entries}
        tuned = {} if inplace else {e.id: _loadable_tuning(catalog, e, runtime) for e in entries}
        times = with_tuned(own, tuned)  # tuning measured out-of-place: in-place entries keep their variant's
        points.update(_tuned_points(times, entries, points))
        winners = winners_per_size(times)
        irs = {key: _candidate_ir(catalog, key, entries) for key in {w.winner for w in winners}}
        ngpus = topology.num_ranks
        elem_bytes = _elem_bytes(type_name)
        granule = size_granule(collective, ngpus, elem_bytes)

        def boundary(left: str, right: str, lo: int, hi: int, _irs: dict[str, Algo] = irs,
                     _topology: Topology = topology, _granule: int = granule) -> int:
            return crossover(_timer(_irs[left], _topology, type_name), _timer(_irs[right], _topology, type_name),
                             lo, hi, _granule)

        ranges = size_ranges(winners, boundary)
        out.append(ExportGroup(topology=topology, fingerprint=fingerprint, collective=collective, inplace=inplace,
                               dtype=type_name, candidates=tuple(entries), points={k: points[k] for k in times},
                               winners=tuple(winners), ranges=tuple(ranges), refused=tuple(refused)))
    return out


def write_export(catalog: Catalog, groups: Sequence[ExportGroup], directory: str | os.PathLike[str], *,
                 force: bool = False, target: str = DEFAULT_TARGET) -> ExportSummary:
    """Write the algorithm directories, loader configs, manifest, plots and report (module docstring), every
    XML as `target`'s runtime loads and selects it; files beyond its algorithm cap are left out and reported."""
    from collsynth.emit.msccl_xml import write_xml

    runtime = get_target(target)
    left_out: list[str] = []
    out = Path(directory)
    if out.exists() and not out.is_dir():
        raise CatalogError(f"{out} exists and is not a directory; choose another --msccl DIR")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise CatalogError(f"{out} exists and is not empty; choose a new directory or pass --force to replace it")
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise CatalogError(f"cannot export to {out}: directory {parent} does not exist")
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=parent))
    files: list[Path] = []
    try:
        (staging / "plots").mkdir()
        by_topology: dict[str, list[ExportGroup]] = {}
        for group in groups:
            by_topology.setdefault(path_slug(group.topology.name), []).append(group)
        manifests: dict[str, list[dict[str, Any]]] = {}
        for topo_slug, topo_groups in by_topology.items():
            algo_dir = staging / topo_slug / "msccl-algorithms"
            algo_dir.mkdir(parents=True)
            manifest = manifests.setdefault(topo_slug, [])
            written = 0
            for group in topo_groups:
                for index, size_range in enumerate(group.ranges):
                    entry = group.entry(size_range.winner)
                    ir = replace(_candidate_ir(catalog, size_range.winner, group.candidates),
                                 min_bytes=size_range.min_bytes, max_bytes=size_range.max_bytes)
                    name = (f"{group.collective}-{'inplace' if group.inplace else 'outofplace'}-{index}-"
                            f"{_size_label(size_range.min_bytes)}-{_size_label(size_range.max_bytes, upper=True)}.xml")
                    if runtime.max_algorithms and written >= runtime.max_algorithms:
                        left_out.append(f"{topo_slug}/{name}")
                        continue
                    written += 1
                    files.append(write_xml(ir, algo_dir / name, runtime))
                    manifest.append({"file": f"msccl-algorithms/{name}", "collective": group.collective,
                                     "coll": ir.collective, "ngpus": ir.ngpus, "inplace": group.inplace,
                                     "minBytes": size_range.min_bytes, "maxBytes": size_range.max_bytes,
                                     "nchunksperloop": ir.nchunksperloop, "entry": entry.id, "name": entry.name,
                                     "source": entry.source, "protocol": ir.proto,
                                     "instances": entry.variant.instances, "compile": group.compile_label(
                                         size_range.winner), "nchannels": ir.nchannels,
                                     "won_sizes": [size_range.first_size, size_range.last_size]})
            topo_dir = staging / topo_slug
            names = [Path(item["file"]).name for item in manifest]
            files.append(write_atomic(topo_dir / "msccl.env", loader_config(topo_groups, runtime.name, names)))
            files.append(write_atomic(topo_dir / "manifest.json",
                                           json.dumps({"topology": topo_groups[0].topology.name,
                                                       "fingerprint": topo_groups[0].fingerprint,
                                                       "dtype": topo_groups[0].dtype, "target": runtime.name,
                                                       "algorithms": manifest,
                                                       "left_out": [x for x in left_out
                                                                    if x.startswith(f"{topo_slug}/")]},
                                                      indent=1) + "\n"))
        plots = {group.slug: _plot(group, staging / "plots" / f"{group.slug}.png") for group in groups}
        files.extend(plots.values())
        from collsynth.catalog.report import export_report

        files.append(write_atomic(staging / "report.md", export_report(groups, catalog.path)))
        _usual_permissions(staging)
        _swap_into_place(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ExportSummary(out, tuple(groups), tuple(out / f.relative_to(staging) for f in files),
                         runtime.name, tuple(left_out))


def loader_config(groups: Sequence[ExportGroup], target: str = DEFAULT_TARGET,
                  files: Sequence[str] | None = None) -> str:
    """The `msccl.env` file: the environment `target`'s loader reads (MSCCL_ALGO_DIR for msccl-executor-nccl and
    RCCL, which ignore NCCL_ALGO's MSCCL token; MSCCL_XML_FILES and NCCL_ALGO=MSCCL,... for microsoft/msccl)."""
    runtime = get_target(target)
    topology = groups[0].topology
    names = list(files) if files is not None else _manifest_files(groups)
    lines = [
        f"# {runtime.runtime} loader configuration for {topology.name} ({topology.num_ranks} ranks), written by "
        "collsynth.",
        "# Use:  source msccl.env   (bash; finds msccl-algorithms/ next to this file), then run the job.",
        '_here="$(cd "$(dirname "${BASH_SOURCE[0]:-$0}")" && pwd)"',
    ]
    if runtime.env == "MSCCL_XML_FILES":
        lines += [
            f"# The loader reads at most {runtime.max_algorithms} files from MSCCL_XML_FILES (colon-separated) and,",
            "# per call, runs an XML whose coll and ngpus match and where minBytes <= size < maxBytes.",
            f'export MSCCL_XML_FILES="{":".join(f"$_here/msccl-algorithms/{name}" for name in names)}"',
            "export NCCL_ALGO=MSCCL,RING,TREE",
        ]
    else:
        lines += [
            "# The scheduler reads every file in MSCCL_ALGO_DIR and, per call, takes the first XML whose coll, ngpus,",
            "# in-place kind and [minBytes, maxBytes] match (maxBytes 0 = no limit) and where count % nchunksperloop",
            "# is 0; other calls fall back to NCCL/RCCL. Ranges below never overlap. NCCL_ALGO plays no part.",
            'export MSCCL_ALGO_DIR="$_here/msccl-algorithms"',
        ]
        if runtime.name == "rccl":
            lines += ["export RCCL_MSCCL_ENABLE=1          # default 1",
                      "export RCCL_MSCCL_FORCE_ENABLE=1    # use MSCCL on GPUs RCCL does not enable it for"]
        else:
            lines += ["export NCCL_MSCCL_ENABLE=1          # default 1"]
    lines.append("unset _here")
    return "\n".join(lines) + "\n"


def _manifest_files(groups: Sequence[ExportGroup]) -> list[str]:
    return [f"{group.collective}-{'inplace' if group.inplace else 'outofplace'}-{index}-"
            f"{_size_label(r.min_bytes)}-{_size_label(r.max_bytes, upper=True)}.xml"
            for group in groups for index, r in enumerate(group.ranges)]


def _usual_permissions(root: Path) -> None:
    """Temp files and directories are private (0600/0700); the export is meant to be shared and loaded."""
    mask = current_umask()
    root.chmod(0o777 & ~mask)
    for path in root.rglob("*"):
        path.chmod((0o777 if path.is_dir() else 0o666) & ~mask)


def _swap_into_place(staging: Path, target: Path) -> None:
    """Rename the finished staging directory to `target`, replacing what was there."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{uuid.uuid4().hex[:8]}")
        os.replace(target, old)
    try:
        os.replace(staging, target)
    except BaseException:
        if old is not None:
            os.replace(old, target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _plot(group: ExportGroup, path: Path) -> Path:
    """busbw vs size of every candidate that wins somewhere, plus the exported envelope."""
    from collsynth.sim.plot import plot_busbw

    winners = list(dict.fromkeys(w.winner for w in group.winners))
    results = [_sim_result(group, group.entry(entry_id).name, group.points[entry_id]) for entry_id in winners]
    envelope = []
    for w in group.winners:
        envelope.append(next(p for p in group.points[w.winner] if p.size_bytes == w.size_bytes))
    results.append(_sim_result(group, "exported (best per size)", tuple(envelope)))
    kind = "in-place" if group.inplace else "out-of-place"
    title = (f"{display_name(group.collective)} on {group.topology.name} ({group.topology.num_ranks} ranks, "
             f"{group.dtype}, {kind}): winners")
    return plot_busbw(results, path, title=title)


def _sim_result(group: ExportGroup, name: str, points: Sequence[SimPoint]) -> Any:
    from collsynth.sim import SimResult, SimRow

    rows = tuple(SimRow(p.size_bytes, p.count, p.dtype, p.time_us, p.algbw_GBps, p.busbw_GBps) for p in points)
    return SimResult(algorithm=name, collective=group.collective, ngpus=group.topology.num_ranks,
                     topology=group.topology.name, dtype=group.dtype, rows=rows,
                     tiles=tuple(p.tiles for p in points), extrapolated=tuple(p.extrapolated for p in points))


def _timer(ir: Algo, topology: Topology, type_name: str) -> Any:
    from collsynth.sim import simulate

    def time_at(size_bytes: int) -> float:
        return simulate(ir, topology, [size_bytes], dtype=type_name).rows[0].time_us

    return time_at


def _loadable_tuning(catalog: Catalog, entry: EntryRow, runtime: Any) -> dict[str, Any]:
    """The entry's provenance with only the tuning records whose XML the target's runtime loads."""
    records = entry.provenance.get("tuned")
    if not isinstance(records, list):
        return {}
    ok: dict[str, bool] = {}
    for record in records:
        digest = record.get("xml_sha256")
        if digest and digest not in ok:
            ok[digest] = target_violation(_stored_ir(catalog, digest), runtime) is None
    return {**entry.provenance, "tuned": [r for r in records if ok.get(r.get("xml_sha256", ""), False)]}


def _tuned_points(times: dict[str, dict[int, float]], entries: Sequence[EntryRow],
                  points: dict[str, tuple[SimPoint, ...]]) -> dict[str, tuple[SimPoint, ...]]:
    """Points of the tuned candidate keys: the entry's own point at that size with the tuned time and busbw."""
    out = {}
    for key in times:
        if TUNED_SEP not in key:
            continue
        entry = next(e for e in entries if e.id == entry_of(key))
        rows = []
        for p in points[entry.id]:
            if p.size_bytes in times[key]:
                record = tuned_record(entry.provenance, p.size_bytes) or {}
                t = times[key][p.size_bytes]
                rows.append(replace(p, time_us=t, algbw_GBps=p.size_bytes / t / 1e3,
                                    busbw_GBps=float(record.get("busbw_GBps", 0.0))))
        out[key] = tuple(rows)
    return out


def _candidate_ir(catalog: Catalog, key: str, entries: Sequence[EntryRow]) -> Algo:
    """The IR of a candidate key: the entry's stored XML, or its tuned configuration's XML, which must pass
    the reference interpreter again before anything is written from it."""
    entry = next(e for e in entries if e.id == entry_of(key))
    if TUNED_SEP not in key:
        return _read_ir(catalog, entry)
    from collsynth.runtime import execute

    ir = _stored_ir(catalog, key.split(TUNED_SEP, 1)[1])
    verdict = execute(ir, "cpu")
    if not verdict.passed:
        raise CatalogError(f"{entry.name}: its tuned XML fails the reference interpreter ({verdict.message}); "
                           "rebuild the catalog entry")
    return ir


def _stored_ir(catalog: Catalog, digest: str) -> Algo:
    from collsynth.catalog.store import load_xml_text
    from collsynth.emit.msccl_xml import read_xml

    return read_xml(load_xml_text(catalog.root, digest))


def _read_ir(catalog: Catalog, entry: EntryRow) -> Algo:
    from collsynth.emit.msccl_xml import read_xml

    return read_xml(catalog.xml_text(entry))


def _type_name(catalog: Catalog, dtype: str | None) -> str:
    from collsynth.sim import dtype_info

    stored = catalog.dtypes()
    if dtype is not None:
        name = dtype_info(dtype)[0]
        if name not in stored:
            have = ", ".join(stored) or "none"
            raise CatalogError(f"{catalog.path}: no times simulated for dtype {dtype!r} (have: {have}); rebuild with "
                               f"dtype = \"{dtype}\" in the plan")
        return name
    if not stored:
        raise CatalogError(f"{catalog.path}: no simulated times; build the catalog first (collsynth catalog build)")
    if len(stored) > 1:
        raise CatalogError(f"{catalog.path}: times for several dtypes ({', '.join(stored)}); choose one with --dtype")
    return stored[0]


def _elem_bytes(type_name: str) -> int:
    from collsynth.sim import dtype_info

    return dtype_info(type_name)[1]


def _size_label(nbytes: int, *, upper: bool = False) -> str:
    if upper and nbytes == 0:
        return "inf"
    return format_size(nbytes).replace(".", "_")
