"""The regression suite: synthesized algorithms against the hand-written library on the same topologies.

A suite is a catalog plan (collsynth/regress/quick.toml, full.toml). Running it builds every entry
through the catalog pipeline (synthesize -> lower -> compile -> interpret -> simulate) into a scratch
catalog, then:
- every entry must pass the interpreter (a wrong result is a regression);
- every entry's predicted time per size is compared with the stored baseline: slower by more than the
  tolerance is a regression, faster is reported as an improvement (accept it with --update-baseline);
  a baseline entry of this suite that no longer appears (a frontier point lost, a program that stopped
  building, a synthesis time-out) is a regression;
- per (topology, collective) and size: the best synthesized against the best hand-written entry, who
  wins and by how much;
- expected shapes (EXPECTED_SHAPES): the SMT frontier's latency-optimal point beats the ring at the
  smallest size, its bandwidth-optimal point matches or beats the ring (within the tolerance) at the
  largest. These are checked claims: failing one fails the suite.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from collsynth.catalog import BuildEvent, Catalog, CompileVariant, EntryRow, Plan, expand_plan, load_plan, run_items
from collsynth.core.signals import release_frames
from collsynth.regress.baseline import Baseline
from collsynth.regress.case_entry import CaseEntry
from collsynth.regress.model_gate import ModelCheck, model_checks, port_steps

SUITES_DIR = Path(__file__).resolve().parent  # quick.toml, full.toml (and the sketch they name)
DEFAULT_TOLERANCE = 0.05
# (topology, collective) cases whose shape against the ring is a checked claim.
EXPECTED_SHAPES = (("dgx1", "allgather"),)

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NEW = "new"


@dataclass(frozen=True)
class Finding:
    severity: str  # regression | improvement | new
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.severity.upper():<11} {self.key}: {self.message}"


@dataclass(frozen=True)
class Matchup:
    """Best synthesized vs best hand-written entry of one case at one size."""

    size_bytes: int
    synthesized: str | None
    synthesized_us: float | None
    handwritten: str | None
    handwritten_us: float | None

    @property
    def winner(self) -> str:
        if self.synthesized_us is None or self.handwritten_us is None:
            return "synthesized" if self.handwritten_us is None else "hand-written"
        return "synthesized" if self.synthesized_us < self.handwritten_us else "hand-written"

    @property
    def speedup(self) -> float | None:
        """Hand-written time / synthesized time (> 1: the synthesized one is faster)."""
        if self.synthesized_us and self.handwritten_us:
            return self.handwritten_us / self.synthesized_us
        return None


@dataclass(frozen=True)
class ShapeCheck:
    case: str
    claim: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class RegressResult:
    suite: str
    dtype: str
    tolerance: float
    entries: tuple[CaseEntry, ...]
    failed_items: tuple[tuple[str, str], ...]  # (item label, message)
    findings: tuple[Finding, ...]
    matchups: Mapping[str, tuple[Matchup, ...]]  # case -> per size
    shapes: tuple[ShapeCheck, ...]
    seconds: float
    model: tuple[ModelCheck, ...] = ()  # the model gate (model_gate.py)
    interrupted: str = ""  # a run stopped by Ctrl-C/SIGTERM: how far it got (it judges only the items finished)

    @property
    def regressions(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == REGRESSION]

    @property
    def passed(self) -> bool:
        return (not self.interrupted and not self.regressions and all(check.passed for check in self.shapes)
                and all(check.passed for check in self.model))

    @property
    def broken(self) -> bool:
        """Failures that no baseline excuses: wrong results, failed items, failed shape or model checks."""
        return (any(not e.passed for e in self.entries) or bool(self.failed_items)
                or not all(check.passed for check in self.shapes) or not all(check.passed for check in self.model))

    def times(self) -> dict[str, dict[int, float]]:
        """Entry key -> size -> us, for the baseline (verified entries only)."""
        return {e.key: dict(e.times_us) for e in self.entries if e.passed}


class SuiteInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the suite: the entries and failed items of the items finished before it."""

    def __init__(self, entries: list[CaseEntry], failed: list[tuple[str, str]], finished: int, total: int) -> None:
        super().__init__("interrupted")
        self.entries, self.failed, self.finished, self.total = entries, failed, finished, total


class RegressInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM stopped the run: `result` judges the items finished (`RegressResult.interrupted`)."""

    def __init__(self, result: RegressResult) -> None:
        super().__init__("interrupted")
        self.result = result


def load_suite(quick: bool) -> Plan:
    return load_plan(SUITES_DIR / ("quick.toml" if quick else "full.toml"))


def entry_key(topology: str, collective: str, name: str, variant: CompileVariant) -> str:
    parts = [topology, collective, name, variant.protocol]
    if variant.instances != 1:
        parts.append(f"i{variant.instances}")
    if variant.inplace:
        parts.append("inplace")
    return "/".join(parts)


def run_suite(plan: Plan, *, jobs: int = 1, db_path: str | Path | None = None,
              on_event: Callable[[BuildEvent], None] | None = None) -> tuple[list[CaseEntry], list[tuple[str, str]]]:
    """Build every entry of the suite into a catalog (a scratch one unless `db_path`, which then also makes
    the run resumable) and return its entries and the items that failed."""
    items = expand_plan(plan)
    with tempfile.TemporaryDirectory(prefix="collsynth-regress-") as scratch:
        path = Path(db_path) if db_path is not None else Path(scratch) / "regress.sqlite"
        with Catalog(path, create=True) as catalog:
            keys = {item.key for item in items}
            try:
                run_items(catalog, items, jobs=jobs, on_event=on_event, item_timeout_s=plan.item_timeout_s)
            except KeyboardInterrupt as stop:  # the items recorded before it are judged; the rest are not
                release_frames(stop)  # the cut-short build's frames go now, not with whoever keeps what is raised
                entries, failed = _recorded(catalog, keys, plan.dtype)
                raise SuiteInterrupted(entries, failed, len(catalog.finished_keys() & keys), len(keys)) from stop
            return _recorded(catalog, keys, plan.dtype)


def _recorded(catalog: Catalog, keys: set[str], dtype: str) -> tuple[list[CaseEntry], list[tuple[str, str]]]:
    """The entries (sorted by key) and the failed items that `catalog` holds of the items `keys`."""
    from collsynth.sim import dtype_info

    type_name = dtype_info(dtype)[0]
    entries = sorted((_case_entry(catalog, row, type_name) for row in catalog.entries() if row.item_key in keys),
                     key=lambda e: e.key)
    failed = [(item.label, item.message) for item in catalog.items() if item.key in keys and item.status == "failed"]
    return entries, failed


def _case_entry(catalog: Catalog, row: EntryRow, type_name: str) -> CaseEntry:
    points = catalog.times(row.id, type_name)
    return CaseEntry(key=entry_key(row.topology, row.collective, row.name, row.variant), topology=row.topology,
                     collective=row.collective, name=row.name, source=row.source, variant=row.variant,
                     chunks=row.chunks, steps=row.steps, rounds=row.rounds, passed=row.ok,
                     message=row.message if row.ok else f"{row.stage}: {row.message}",
                     times_us={p.size_bytes: p.time_us for p in points},
                     busbw={p.size_bytes: p.busbw_GBps for p in points}, tuned_us=_tuned(row.provenance),
                     port_steps=_port_steps(catalog, row))


def _port_steps(catalog: Catalog, row: EntryRow) -> int | None:
    """`port_steps` of the entry's schedule (kept in the store for tuned entries), None when not kept."""
    from collsynth.catalog.store import load_xml_text
    from collsynth.core.errors import CollsynthError
    from collsynth.schedule import Algorithm

    sha = row.provenance.get("tuned_algorithm_sha256")
    if not row.ok or not isinstance(sha, str):
        return None
    try:
        return port_steps(Algorithm.from_json(load_xml_text(catalog.root, sha)))
    except CollsynthError:
        return None


def _tuned(provenance: Mapping[str, object]) -> dict[int, float]:
    """nccl-tests size -> tuned time, from the catalog's tuning records (none when it was not tuned)."""
    records = provenance.get("tuned")
    if not isinstance(records, list):
        return {}
    return {int(r["size_bytes"]): float(r["time_us"]) for r in records}


def compare_with_baseline(entries: Sequence[CaseEntry], failed_items: Sequence[tuple[str, str]], baseline: Baseline,
                          suite: str, tolerance: float, complete: bool = True) -> list[Finding]:
    """Regressions (wrong results, slower than the baseline, lost entries, failed items), improvements
    and entries new to the baseline. Lost entries only for a `complete` run (an interrupted one did not try
    them all)."""
    findings = []
    for label, message in failed_items:
        findings.append(Finding(REGRESSION, label, f"failed: {message}"))
    stored = baseline.for_suite(suite)
    seen = set()
    for entry in entries:
        seen.add(entry.key)
        if not entry.passed:
            findings.append(Finding(REGRESSION, entry.key, f"wrong result or no IR: {entry.message}"))
            continue
        base = stored.get(entry.key) or baseline.entries.get(entry.key)
        if base is None:
            findings.append(Finding(NEW, entry.key, "no baseline yet (accept with --update-baseline)"))
            continue
        slower, faster = [], []
        for size, now in sorted(entry.times_us.items()):
            before = base.times_us.get(size)
            if before is None or before <= 0:
                continue
            ratio = now / before
            if ratio > 1 + tolerance:
                slower.append((size, before, now, ratio))
            elif ratio < 1 - tolerance:
                faster.append((size, before, now, ratio))
        if slower:
            size, before, now, ratio = max(slower, key=lambda x: x[3])
            findings.append(Finding(REGRESSION, entry.key, f"slower than the baseline at {len(slower)} sizes; worst "
                                                           f"{_size(size)}: {before:.2f} -> {now:.2f} us "
                                                           f"(+{100 * (ratio - 1):.1f} %)"))
        if faster:
            size, before, now, ratio = min(faster, key=lambda x: x[3])
            findings.append(Finding(IMPROVEMENT, entry.key, f"faster at {len(faster)} sizes; best {_size(size)}: "
                                                            f"{before:.2f} -> {now:.2f} us "
                                                            f"({100 * (ratio - 1):.1f} %)"))
    for key in sorted(set(stored) - seen) if complete else ():
        findings.append(Finding(REGRESSION, key, "in the baseline but not produced any more (lost frontier point, "
                                                 "program that no longer builds, or a time-out)"))
    return findings


def matchups(entries: Sequence[CaseEntry]) -> dict[str, tuple[Matchup, ...]]:
    """Per case and size: the best synthesized and the best hand-written verified entry, each at its tuned
    time where tuning beat its compiled variant (CaseEntry.best_us)."""
    cases: dict[str, list[CaseEntry]] = {}
    for entry in entries:
        if entry.passed:
            cases.setdefault(entry.case, []).append(entry)
    out = {}
    for case, members in sorted(cases.items()):
        sizes = sorted({size for e in members for size in e.times_us})
        rows = []
        for size in sizes:
            synth = _fastest([e for e in members if e.synthesized], size)
            hand = _fastest([e for e in members if not e.synthesized], size)
            rows.append(Matchup(size, synth.name if synth else None, synth.best_us(size) if synth else None,
                                hand.name if hand else None, hand.best_us(size) if hand else None))
        out[case] = tuple(rows)
    return out


def _fastest(entries: Sequence[CaseEntry], size: int) -> CaseEntry | None:
    having = [e for e in entries if size in e.times_us]
    return min(having, key=lambda e: (e.best_us(size), e.name)) if having else None


def shape_checks(entries: Sequence[CaseEntry], expected: Sequence[tuple[str, str]] = EXPECTED_SHAPES,
                 tolerance: float = DEFAULT_TOLERANCE) -> list[ShapeCheck]:
    """The SMT frontier against the ring on each expected case (module docstring)."""
    checks = []
    for topology, collective in expected:
        case = f"{topology}/{collective}"
        # (entry, steps, rounds per chunk) of each verified frontier point with a complete shape
        frontier = [(e, e.steps, Fraction(e.rounds, e.chunks)) for e in entries
                    if e.case == case and e.source == "pareto" and e.passed
                    and e.chunks and e.steps is not None and e.rounds is not None]
        ring = next((e for e in entries if e.case == case and e.name == f"ring_{collective}" and e.passed), None)
        if not frontier or ring is None:
            checks.append(ShapeCheck(case, "frontier vs ring", False,
                                     "missing: needs verified SMT frontier entries and the hand-written ring"))
            continue
        latency = min(frontier, key=lambda f: (f[1], f[2], f[0].name))[0]
        bandwidth = min(frontier, key=lambda f: (f[2], f[1], f[0].name))[0]
        sizes = sorted(set(ring.times_us) & set(latency.times_us) & set(bandwidth.times_us))
        if not sizes:
            checks.append(ShapeCheck(case, "frontier vs ring", False, "no common simulated sizes"))
            continue
        small, large = sizes[0], sizes[-1]
        lat_us, ring_small = latency.times_us[small], ring.times_us[small]
        checks.append(ShapeCheck(
            case, f"latency-optimal {latency.name} beats ring at {_size(small)}", lat_us < ring_small,
            f"{lat_us:.2f} us vs ring {ring_small:.2f} us ({ring_small / lat_us:.2f}x)"))
        bw_us, ring_large = bandwidth.times_us[large], ring.times_us[large]
        checks.append(ShapeCheck(
            case, f"bandwidth-optimal {bandwidth.name} matches or beats ring at {_size(large)}",
            bw_us <= ring_large * (1 + tolerance),
            f"{bw_us:.1f} us vs ring {ring_large:.1f} us ({ring_large / bw_us:.3f}x; tolerance {100 * tolerance:g} %)"))
    return checks


def evaluate(plan: Plan, entries: Sequence[CaseEntry], failed_items: Sequence[tuple[str, str]], baseline: Baseline,
             *, tolerance: float = DEFAULT_TOLERANCE, seconds: float = 0.0,
             expected: Sequence[tuple[str, str]] = EXPECTED_SHAPES, interrupted: str = "") -> RegressResult:
    """Judge the entries; an `interrupted` run (how far it got) is judged on what finished: no lost entries,
    no shape checks (they need the whole suite)."""
    from collsynth.sim import dtype_info

    ran_cases = {e.case for e in entries}
    wanted = [case for case in expected if f"{case[0]}/{case[1]}" in ran_cases or _planned(plan, case)]
    findings = compare_with_baseline(entries, failed_items, baseline, plan.name, tolerance, complete=not interrupted)
    return RegressResult(suite=plan.name, dtype=dtype_info(plan.dtype)[0], tolerance=tolerance,
                         entries=tuple(entries), failed_items=tuple(failed_items), findings=tuple(findings),
                         matchups=matchups(entries),
                         shapes=() if interrupted else tuple(shape_checks(entries, wanted, tolerance)),
                         seconds=seconds, model=tuple(model_checks(entries)), interrupted=interrupted)


def _planned(plan: Plan, case: tuple[str, str]) -> bool:
    from collsynth.collectives import canonical_name

    return any(t.topology == case[0] and case[1] in {canonical_name(c) for c in t.collectives} for t in plan.targets)


def regress(plan: Plan, baseline: Baseline, *, tolerance: float = DEFAULT_TOLERANCE, jobs: int = 1,
            db_path: str | Path | None = None, on_event: Callable[[BuildEvent], None] | None = None,
            expected: Sequence[tuple[str, str]] = EXPECTED_SHAPES) -> RegressResult:
    """Run the suite and judge it (module docstring)."""
    from collsynth.core.errors import CollsynthError

    if not 0 <= tolerance < 1:
        raise CollsynthError(f"tolerance must be in [0, 1), got {tolerance}; e.g. 0.05 for 5 %")
    started = time.perf_counter()
    try:
        entries, failed = run_suite(plan, jobs=jobs, db_path=db_path, on_event=on_event)
    except SuiteInterrupted as stop:
        release_frames(stop)
        raise RegressInterrupted(evaluate(
            plan, stop.entries, stop.failed, baseline, tolerance=tolerance, seconds=time.perf_counter() - started,
            expected=expected, interrupted=f"{stop.finished} of {stop.total} items finished")) from stop
    return evaluate(plan, entries, failed, baseline, tolerance=tolerance, seconds=time.perf_counter() - started,
                    expected=expected)


def _size(nbytes: int) -> str:
    from collsynth.core.units import format_size

    return format_size(nbytes)
