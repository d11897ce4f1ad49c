"""The generate-and-compile pipeline for one work item, a pure function of the item:

    synthesize (or build the hand-written program) -> lower -> compile -> interpret -> simulate -> XML text
    -> tune

Tuning (collsynth.tune) searches each algorithm's configurations (protocol, instances, threadblock layout,
message merging) per size of the item; the tuned configuration and time per size go into the provenance of
every entry of that algorithm (`provenance["tuned"]`), each picked configuration checked by the interpreter.

Every algorithm is compiled in every variant of the item. Nothing becomes XML unless the CPU reference
interpreter passed (DESIGN.md: every IR is checked before it is written anywhere); a failure at any stage
becomes a failed entry naming the stage and the message. `run_item` never raises for a bad algorithm, so one
failure cannot stop a catalog build; it runs in worker processes and returns picklable data.

`catalog build --target T` (`with_target`) adds the runtime target to every item's settings (so its key, and a
catalog built for another target keeps its own entries): each entry is then compiled for T, split to T's loader
limits (compiler/split.py) or failed at the compile stage with the one line naming the limit and the runtime.
The stored XML stays in collsynth's own spelling; `catalog export --target` writes the runtime's.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from collsynth.catalog.plan import LIBRARY, CompileVariant, WorkItem
from collsynth.catalog.results import EntryResult, ItemResult, SimPoint
from collsynth.catalog.sources import build_library_program, synthesize, tool_versions
from collsynth.core.errors import CollsynthError
from collsynth.ir import Algo
from collsynth.schedule import Algorithm
from collsynth.topologies import Topology

TARGET_PARAM = "target"  # the item setting naming the runtime target its entries are compiled for


def with_target(items: Sequence[WorkItem], target: str | None) -> list[WorkItem]:
    """The items with their entries compiled for `target` (None: as they are, no runtime's limits). An unknown
    target is refused in one line (collsynth.core.targets.TargetError)."""
    if target is None:
        return list(items)
    from collsynth.core.targets import get_target

    name = get_target(target).name
    return [replace(item, params=tuple(p for p in item.params if p[0] != TARGET_PARAM) + ((TARGET_PARAM, name),))
            for item in items]


def run_item(item: WorkItem) -> ItemResult:
    """Run one work item end to end (module docstring)."""
    started = time.perf_counter()
    versions = tool_versions()
    target = item.param(TARGET_PARAM)
    if item.source == LIBRARY:
        name = str(item.param("program"))
        provenance = {"synthesizer": "hand-written", "program": name, "versions": versions}
        if target is not None:
            provenance["target"] = target
        built = tuple(
            check_program(name, variant, partial(build_library_program, name, item.topology, variant),
                          item.topology, item.sizes, item.dtype, provenance=provenance, target=target)
            for variant in item.variants)
        tuned = with_tuning(built, item, partial(_library_candidate, name, item))
        return ItemResult(item.key, True, _summary(tuned), tuned, time.perf_counter() - started, provenance)
    try:
        synthesized = synthesize(item)
    except CollsynthError as exc:
        return ItemResult(item.key, False, f"synthesis: {exc}", (), time.perf_counter() - started,
                          {"synthesizer": item.source, "versions": tool_versions()})
    except Exception as exc:  # a bug in a synthesizer must not stop the build: record it with its origin
        return ItemResult(item.key, False, f"synthesis: internal error: {_describe(exc)}", (),
                          time.perf_counter() - started, {"synthesizer": item.source, "versions": tool_versions()})
    entries: list[EntryResult] = []
    names: dict[str, int] = {}
    for algorithm in synthesized.algorithms:
        name = algorithm_entry_name(item.source, algorithm)
        names[name] = names.get(name, 0) + 1
        if names[name] > 1:  # two algorithms of one shape: keep both, distinctly named
            name = f"{name}-{names[name]}"
        for lowering in lowerings(algorithm):
            entries += _lowered_entries(item, name, algorithm, lowering, versions)
    return ItemResult(item.key, True, _summary(entries), tuple(entries), time.perf_counter() - started,
                      synthesized.provenance)


TUNED_XML = "tuned_xml"  # provenance key of the tuned XML texts, until the builder stores them by hash
# Past this many ranks one compilation takes seconds to minutes, so the catalog tunes cluster entries on a
# smaller grid: one instance and contiguous merging, every protocol, fusion and threadblock pairing (the
# knobs that decide the large sizes there: 4xndv4 AllReduce at 1 GB, 10,701 unfused and unpaired vs 20,487 us).
CLUSTER_TUNE_RANKS = 64


def tuning_grid(topology: Topology) -> Any:
    """The grid the catalog tunes an entry of `topology` on (see CLUSTER_TUNE_RANKS)."""
    from collsynth.tune.entry import CATALOG_GRID
    from collsynth.tune.space import Grid

    if topology.num_ranks <= CLUSTER_TUNE_RANKS:
        return CATALOG_GRID
    return Grid(instances=(1,), merge=("contiguous",))


def with_tuning(entries: tuple[EntryResult, ...], item: WorkItem, candidate: Callable[[], Any],
                schedule: Algorithm | None = None) -> tuple[EntryResult, ...]:
    """The entries of one algorithm with its tuned configuration per size in their provenance (when at least
    one of them passed; a tuning failure is recorded, never raised). Every configuration is compiled for the
    item's runtime target (`catalog build --target`), so a configuration that runtime refuses is never picked.
    `schedule`: the synthesized algorithm a program candidate was lowered from (kept like a lowered one's)."""
    if not any(entry.passed for entry in entries):
        return entries
    from collsynth.catalog.store import xml_sha256
    from collsynth.tune.entry import tune_entry_xml

    started = time.perf_counter()
    xmls: dict[str, str] = {}
    tuned_candidate = candidate()
    try:
        tuned: Any
        tuned, by_config = tune_entry_xml(tuned_candidate, item.topology, item.collective_name, item.sizes,
                                          dtype=item.dtype, name=ir_name(item.topology, item.collective_name,
                                                                         entries[0].name, entries[0].variant),
                                          grid=tuning_grid(item.topology), target=item.param(TARGET_PARAM))
        for record in tuned:  # the XML of each record's configuration; build.py moves it to the XML store
            text = by_config[record["config_key"]]
            record["xml_sha256"] = xml_sha256(text)
            xmls[record["xml_sha256"]] = text
    except CollsynthError as exc:
        tuned = {"error": str(exc)}
    seconds = round(time.perf_counter() - started, 4)
    extra = {"tuned": tuned, "tune_seconds": seconds, TUNED_XML: xmls}
    schedule = (getattr(tuned_candidate, "algorithm", None) or schedule) if isinstance(tuned, list) else None
    if schedule is not None:  # kept so that new sizes can be tuned later (build.resimulate_missing)
        text = schedule.to_json()
        extra["tuned_algorithm_sha256"] = xml_sha256(text)
        xmls[xml_sha256(text)] = text
    return tuple(replace(entry, provenance={**entry.provenance, **extra}) if entry.passed else entry
                 for entry in entries)


def _lowered_entries(item: WorkItem, name: str, algorithm: Algorithm, lowering: str | None,
                     versions: dict[str, str]) -> tuple[EntryResult, ...]:
    """The entries of one synthesized algorithm under one lowering (None: its usual one), one per variant the
    lowering can build, tuned; an extra lowering's entries are named `<name>-<lowering>`."""
    target = item.param(TARGET_PARAM)
    provenance = {**dict(algorithm.provenance), "algorithm": algorithm.name, "versions": versions}
    if target is not None:
        provenance["target"] = target
    variants = item.variants
    if lowering is not None:
        name = f"{name}-{lowering}"
        provenance[LOWERING] = lowering
        variants = tuple(variant for variant in variants if not variant.inplace)  # out of place only
    checked = tuple(check_program(
        name, variant, partial(_lower, algorithm, variant, lowering), item.topology, item.sizes, item.dtype,
        provenance=provenance, shape=(algorithm.chunks, algorithm.num_steps, algorithm.rounds), target=target)
        for variant in variants)
    return with_tuning(checked, item, partial(_algorithm_candidate, name, algorithm, lowering), algorithm)


def _library_candidate(name: str, item: WorkItem) -> Any:
    from collsynth.tune import LIBRARY as TUNE_LIBRARY
    from collsynth.tune import Candidate

    return Candidate(name, TUNE_LIBRARY, program=build_library_program(name, item.topology, item.variants[0]))


def _coalesced(algorithm: Algorithm) -> bool:
    """Hierarchical compositions lower with a block per message (collsynth.algorithms.hier_lower)."""
    return algorithm.provenance.get("synthesizer") == "hierarchical"


# The provenance key naming an entry's extra lowering. A gateway AllToAll composition gets a second entry
# lowered by `lower_gateway` (one message per GPU and node pair, sender-side transpose): on 4xndv4 it is 3.2x
# faster at 1 KB and 1.2x slower at 1 GB than the block-per-message `lower_composition`, so the catalog keeps
# both and the per-size selection picks.
LOWERING = "lowering"
GATEWAY_LOWERING = "gateway"
# The node-rail AllToAll composition of direct phases gets a second entry lowered by `lower_rail_gather` (one
# rail message per GPU and remote node, as the library's two-step): the block-per-message lowering leaves the
# NIC idle a quarter of the time at 1 GB on 4xndv4 (55.0 vs 40.5 ms).
RAIL_GATHER_LOWERING = "gather"


def lowerings(algorithm: Algorithm) -> tuple[str | None, ...]:
    """The lowerings the catalog makes entries of (None: the algorithm's usual one)."""
    if _coalesced(algorithm) and algorithm.provenance.get("plan") == "gateway":
        return None, GATEWAY_LOWERING
    if _coalesced(algorithm) and _rail_gathered(algorithm):
        return None, RAIL_GATHER_LOWERING
    return (None,)


def _rail_gathered(algorithm: Algorithm) -> bool:
    from collsynth.algorithms.hier_lower import RAIL_GATHER_SOURCES

    provenance = algorithm.provenance
    return (algorithm.collective.name == "alltoall" and provenance.get("plan") == "node-rail"
            and all(provenance.get(k) == v for k, v in RAIL_GATHER_SOURCES.items()))


def _algorithm_candidate(name: str, algorithm: Algorithm, lowering: str | None = None) -> Any:
    from collsynth.tune import MILP, SYNTHESIZED, Candidate

    if lowering == GATEWAY_LOWERING:
        from collsynth.algorithms.hier_lower import lower_gateway

        return Candidate(name, SYNTHESIZED, program=lower_gateway(algorithm, transpose="sender"))
    if lowering == RAIL_GATHER_LOWERING:
        from collsynth.algorithms.hier_lower import lower_rail_gather

        return Candidate(name, SYNTHESIZED, program=lower_rail_gather(algorithm))
    if _coalesced(algorithm):  # tuned as its coalesced program (the tuner's own lowering is per chunk)
        from collsynth.algorithms.hier_lower import lower_composition

        return Candidate(name, SYNTHESIZED, program=lower_composition(algorithm))  # out of place, as the tuner
    timed = any(send.start_us is not None for _, send in algorithm.sends())
    return Candidate(name, MILP if timed else SYNTHESIZED, algorithm=algorithm)


def algorithm_entry_name(source: str, algorithm: Algorithm) -> str:
    """A short, stable name for a synthesized algorithm: smt-c2s2r3, milp-<sketch>-..."""
    if source == "milp":
        sketch = str(algorithm.provenance.get("sketch", "sketch"))
        return f"milp-{_slug(sketch)}-c{algorithm.chunks}"
    return f"smt-c{algorithm.chunks}s{algorithm.num_steps}r{algorithm.rounds}"


def _lower(algorithm: Algorithm, variant: CompileVariant, lowering: str | None = None) -> Any:
    from collsynth.language.lower import lower_to_program

    if lowering == GATEWAY_LOWERING:
        from collsynth.algorithms.hier_lower import lower_gateway

        return lower_gateway(algorithm, transpose="sender", protocol=variant.protocol, instances=variant.instances)
    if lowering == RAIL_GATHER_LOWERING:
        from collsynth.algorithms.hier_lower import lower_rail_gather

        return lower_rail_gather(algorithm, protocol=variant.protocol, instances=variant.instances)
    if _coalesced(algorithm):
        from collsynth.algorithms.hier_lower import lower_composition

        return lower_composition(algorithm, instances=variant.instances, protocol=variant.protocol,
                                 inplace=variant.inplace or None)
    return lower_to_program(algorithm, instances=variant.instances, protocol=variant.protocol,
                            inplace=variant.inplace or None)


def check_program(name: str, variant: CompileVariant, build: Callable[[], Any], topology: Topology,
                  sizes: Sequence[int], dtype: str, *, provenance: dict[str, Any] | None = None,
                  shape: tuple[int | None, int | None, int | None] = (None, None, None),
                  target: str | None = None) -> EntryResult:
    """Build (or lower) the program, compile it (for `target`'s runtime when given: split to its limits, or
    refused naming the limit), interpret it and simulate it: one entry."""
    from collsynth.runtime import execute

    chunks, steps, rounds = shape
    base = EntryResult(name=name, variant=variant, passed=False, message="", chunks=chunks, steps=steps,
                       rounds=rounds, provenance=dict(provenance or {}))
    seconds: dict[str, float] = {}
    stage = "lower"
    try:
        started = time.perf_counter()
        program = build()
        seconds[stage] = time.perf_counter() - started
        stage = "compile"
        started = time.perf_counter()
        ir, fallback = _compile(program, target)
        if fallback:
            base.provenance["compile_options"] = fallback
        ir = replace(ir, name=ir_name(topology, program.collective.name, name, variant))
        seconds[stage] = time.perf_counter() - started
        stage = "interpret"
        started = time.perf_counter()
        verdict = execute(ir, backend="cpu", collective=program.collective)
        seconds[stage] = time.perf_counter() - started
        stats = ir_stats(ir)
        if target is not None:
            stats["target"] = target
        if not verdict.passed:
            return replace(base, stage=stage, message=f"{verdict.failure}: {verdict.message}", ir_stats=stats)
        stage = "simulate"
        started = time.perf_counter()
        times = simulate_points(ir, topology, sizes, dtype)
        seconds[stage] = time.perf_counter() - started
        stage = "xml"
        from collsynth.emit.msccl_xml import ir_to_xml

        xml = ir_to_xml(ir)
    except CollsynthError as exc:
        return replace(base, stage=stage, message=str(exc))
    except Exception as exc:  # a bug in a later stage must not stop the build: record where it happened
        return replace(base, stage=stage, message=f"internal error: {_describe(exc)}")
    base.provenance["seconds"] = {k: round(v, 4) for k, v in seconds.items()}
    return replace(base, passed=True, message=verdict.message, xml=xml, ir_stats=stats, times=times)


UNFUSED_UNPAIRED = {"instr_fusion": False, "pair_threadblocks": False}


def _compile(program: Any, target: str | None) -> tuple[Algo, dict[str, bool]]:
    """Compile with the default options; when that is refused, once more unfused and unpaired (one
    threadblock per connection side), the form in which compositions at 64 nodes fit a channel's 32
    threadblocks. The first refusal is the one reported when neither fits. Returns the IR and the options
    that differ from the defaults (recorded in the entry's provenance)."""
    from collsynth.compiler import compile_program

    try:
        return (compile_program(program) if target is None else compile_program(program, target)), {}
    except CollsynthError as refused:
        try:
            return (compile_program(program, target=target, instr_fusion=False, pair_threadblocks=False),
                    dict(UNFUSED_UNPAIRED))
        except CollsynthError:
            raise refused from None


def simulate_points(ir: Algo, topology: Topology, sizes: Sequence[int], dtype: str) -> tuple[SimPoint, ...]:
    """The simulator's rows for `sizes`, as catalog points."""
    from collsynth.sim import simulate

    result = simulate(ir, topology, list(sizes), dtype=dtype)
    return tuple(SimPoint(requested, row.size_bytes, row.count, row.type, row.time_us, row.algbw_GBps,
                          row.busbw_GBps, tiles, extrapolated)
                 for requested, row, tiles, extrapolated in zip(sizes, result.rows, result.tiles, result.extrapolated,
                                                                strict=True))


def ir_name(topology: Topology, collective: str, name: str, variant: CompileVariant) -> str:
    """The `name` attribute of the XML: what the entry is, readable in MSCCL's logs."""
    parts = [_slug(topology.name), collective, name, variant.protocol]
    if variant.instances != 1:
        parts.append(f"i{variant.instances}")
    if variant.inplace:
        parts.append("inplace")
    return "-".join(parts)


def ir_stats(ir: Algo) -> dict[str, Any]:
    tbs = [len(gpu.tbs) for gpu in ir.gpus]
    return {"coll": ir.collective, "proto": ir.proto, "nchannels": ir.nchannels, "nchunksperloop": ir.nchunksperloop,
            "ngpus": ir.ngpus, "inplace": ir.inplace, "max_threadblocks": max(tbs, default=0),
            "steps": ir.num_steps}


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._" else "_" for ch in text).strip("_") or "x"


def _summary(entries: Sequence[EntryResult]) -> str:
    passed = sum(entry.passed for entry in entries)
    return f"{passed}/{len(entries)} entries verified"


def _describe(exc: BaseException) -> str:
    """Type, message and where it was raised (innermost frame), on one line."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {frames[-1].filename.rsplit('/', 1)[-1]}:{frames[-1].lineno}" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"
