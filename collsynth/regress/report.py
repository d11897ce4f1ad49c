"""The regression report: a one-screen text summary, and a directory with Markdown tables, busbw plots and
the raw results as JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from collsynth.collectives import display_name
from collsynth.core.files import write_atomic
from collsynth.core.units import format_size
from collsynth.regress.model_gate import MODEL_GATE
from collsynth.regress.suite import IMPROVEMENT, NEW, REGRESSION, CaseEntry, RegressResult


def summary_text(result: RegressResult) -> str:
    """What the CLI prints: verdict, findings, shape checks, and per case who wins where."""
    lines = [f"regress {result.suite}: {len(result.entries)} entries, {len(result.failed_items)} failed items, "
             f"{result.seconds:.1f} s (tolerance {100 * result.tolerance:g} %)"]
    for finding in result.findings:
        if finding.severity in (REGRESSION, IMPROVEMENT):
            lines.append(f"  {finding}")
    new = sum(f.severity == NEW for f in result.findings)
    if new:
        lines.append(f"  {new} entries have no baseline yet (collsynth regress --update-baseline records them)")
    for check in result.shapes:
        lines.append(f"  shape {'ok  ' if check.passed else 'FAIL'} {check.case}: {check.claim}: {check.detail}")
    for case, rows in result.matchups.items():
        contested = [r for r in rows if r.synthesized and r.handwritten]
        if not contested:
            continue
        wins = sum(r.winner == "synthesized" for r in contested)
        best = max(contested, key=lambda r: r.speedup or 0.0)
        lines.append(f"  {case}: synthesized wins {wins}/{len(contested)} sizes; best {best.speedup:.2f}x at "
                     f"{format_size(best.size_bytes)} ({best.synthesized} vs {best.handwritten})")
    for model_check in result.model:
        lines.append(f"  model {'ok  ' if model_check.passed else 'FAIL'} {model_check}")
    lines.append(f"INTERRUPTED: {result.interrupted}; judged on those only, no verdict" if result.interrupted
                 else "PASS" if result.passed else f"FAIL: {len(result.regressions)} regressions, "
                 f"{sum(not c.passed for c in result.shapes)} failed shape checks, "
                 f"{sum(not c.passed for c in result.model)} frontier points over {MODEL_GATE:.2f}x their model")
    return "\n".join(lines)


def write_report(result: RegressResult, directory: str | os.PathLike[str]) -> list[Path]:
    """DIR/report.md (tables), DIR/results.json, DIR/plots/<topology>-<collective>.png (busbw vs size)."""
    target = Path(directory)
    (target / "plots").mkdir(parents=True, exist_ok=True)
    files: list[Path] = []
    cases: dict[str, list[CaseEntry]] = {}
    for entry in result.entries:
        if entry.passed:
            cases.setdefault(entry.case, []).append(entry)
    plots = {case: _plot(case, members, target / "plots" / f"{_slug(case)}.png", result.dtype)
             for case, members in sorted(cases.items())}
    files.extend(plots.values())
    files.append(write_atomic(target / "report.md", _markdown(result, plots, target)))
    files.append(write_atomic(target / "results.json", json.dumps(_as_json(result), indent=1) + "\n"))
    return files


def _markdown(result: RegressResult, plots: dict[str, Path], root: Path) -> str:
    lines = [f"# Regression report: suite `{result.suite}`", "",
             f"**{_verdict(result)}** — {len(result.entries)} entries, "
             f"{len(result.regressions)} regressions, tolerance {100 * result.tolerance:g} %, {result.seconds:.1f} s. "
             "Times are the alpha-beta simulator's predictions; every entry was checked on the CPU reference "
             "interpreter first.", ""]
    judged = [f for f in result.findings if f.severity != NEW]
    fresh = [f.key for f in result.findings if f.severity == NEW]
    if judged or fresh:
        lines += ["## Findings", ""]
    if judged:
        lines += ["| severity | entry | what |", "|---|---|---|"]
        lines += [f"| {f.severity} | `{f.key}` | {f.message} |" for f in judged]
        lines.append("")
    if fresh:
        lines += [f"{len(fresh)} entries have no baseline yet (`collsynth regress --update-baseline` records them): "
                  + ", ".join(f"`{key}`" for key in fresh), ""]
    if result.shapes:
        lines += ["## Expected shape", "", "| case | claim | holds | detail |", "|---|---|---|---|"]
        lines += [f"| {c.case} | {c.claim} | {'yes' if c.passed else '**no**'} | {c.detail} |" for c in result.shapes]
        lines.append("")
    if result.model:
        lines += [f"## Compiled vs the synthesizer's model (gate: {MODEL_GATE:.2f}x)", "",
                  "| case | point | size | model (us) | compiled (us) | ratio | bound (us) | tuned | holds |",
                  "|---|---|---:|---:|---:|---:|---:|---|---|"]
        lines += [f"| {c.case} | `{c.name}` | {format_size(c.size_bytes)} | {c.model_us:.2f} | {c.compiled_us:.2f} | "
                  f"{c.ratio:.3f} | {c.bound_us:.2f} | {'yes' if c.tuned else 'no'} | "
                  f"{'yes' if c.passed else '**no**'} |" for c in result.model]
        lines.append("")
    lines += ["## Synthesized vs hand-written", ""]
    for case, rows in result.matchups.items():
        topology, collective = case.split("/", 1)
        lines += [f"### {display_name(collective)} on {topology}", ""]
        if case in plots:
            lines += [f"![busbw]({plots[case].relative_to(root).as_posix()})", ""]
        lines += ["| size | best synthesized | time (us) | best hand-written | time (us) | winner | speedup |",
                  "|---:|---|---:|---|---:|---|---:|"]
        for r in rows:
            lines.append(f"| {format_size(r.size_bytes)} | {_name(r.synthesized)} | {_us(r.synthesized_us)} | "
                         f"{_name(r.handwritten)} | {_us(r.handwritten_us)} | {r.winner} | "
                         f"{'-' if r.speedup is None else f'{r.speedup:.2f}x'} |")
        lines.append("")
    lines += ["## Entries", "", "| entry | source | C / S / R | verified |", "|---|---|---|---|"]
    for e in result.entries:
        shape = " / ".join("-" if v is None else str(v) for v in (e.chunks, e.steps, e.rounds))
        lines.append(f"| `{e.key}` | {e.source} | {shape} | {'yes' if e.passed else 'no: ' + e.message} |")
    if result.failed_items:
        lines += ["", "## Failed items", ""]
        lines += [f"- {label}: {message}" for label, message in result.failed_items]
    return "\n".join(lines) + "\n"


def _verdict(result: RegressResult) -> str:
    if result.interrupted:
        return f"INTERRUPTED ({result.interrupted}; judged on those only, no verdict)"
    return "PASS" if result.passed else "FAIL"


def _plot(case: str, members: list[CaseEntry], path: Path, dtype: str) -> Path:
    from collsynth.sim import SimResult, SimRow
    from collsynth.sim.plot import plot_busbw

    topology, collective = case.split("/", 1)
    results = []
    for e in sorted(members, key=lambda e: (e.synthesized, e.name)):
        sizes = sorted(e.times_us)
        rows = tuple(SimRow(s, 0, dtype, e.times_us[s], 0.0, e.busbw[s]) for s in sizes)
        label = f"{e.name} ({'synthesized' if e.synthesized else 'hand-written'})"
        results.append(SimResult(algorithm=label, collective=collective, ngpus=0, topology=topology, dtype=dtype,
                                 rows=rows, tiles=tuple(1 for _ in rows), extrapolated=tuple(False for _ in rows)))
    return plot_busbw(results, path, title=f"{display_name(collective)} on {topology}: synthesized vs hand-written")


def _as_json(result: RegressResult) -> dict:  # type: ignore[type-arg]
    return {
        "suite": result.suite, "passed": result.passed, "interrupted": result.interrupted or None,
        "dtype": result.dtype, "tolerance": result.tolerance,
        "seconds": result.seconds,
        "findings": [{"severity": f.severity, "entry": f.key, "message": f.message} for f in result.findings],
        "shapes": [{"case": c.case, "claim": c.claim, "passed": c.passed, "detail": c.detail} for c in result.shapes],
        "entries": [{"key": e.key, "source": e.source, "chunks": e.chunks, "steps": e.steps, "rounds": e.rounds,
                     "passed": e.passed, "message": e.message,
                     "times_us": {str(s): t for s, t in sorted(e.times_us.items())}} for e in result.entries],
        "failed_items": [{"item": label, "message": message} for label, message in result.failed_items],
        "model": [{"case": c.case, "point": c.name, "size_bytes": c.size_bytes, "model_us": c.model_us,
                   "compiled_us": c.compiled_us, "bound_us": c.bound_us, "tuned": c.tuned, "passed": c.passed}
                  for c in result.model],
    }


def _name(name: str | None) -> str:
    return f"`{name}`" if name else "-"


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _slug(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in text.replace("/", "-"))
