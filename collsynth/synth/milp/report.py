"""The MILP pipeline's human-readable summary and its report directory (report.md, timeline, JSON)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from collsynth.core.files import write_atomic
from collsynth.schedule.result import StageReport
from collsynth.synth.milp.result import MilpResult


def stage_line(stage: StageReport) -> str:
    """One stage as the summary prints it: name, status, seconds, objective, bound, gap, model, note."""
    parts = [f"{stage.name:<24} {stage.status or stage.outcome:<11} {stage.seconds:8.2f} s"]
    if stage.objective is not None:
        parts.append(f"obj {stage.objective:.3f} {stage.unit}")
    if stage.bound is not None:
        parts.append(f"bound {stage.bound:.3f} {stage.unit}")
    if stage.gap is not None:
        parts.append(f"gap {100 * stage.gap:.2f}%")
    if stage.size is not None:
        parts.append(f"[{stage.size}]")
    if stage.note:
        parts.append(f"({stage.note})")
    return "  ".join(parts)


def summary(result: MilpResult) -> str:
    algorithm = result.best
    lines = [f"{algorithm.name}: {algorithm.collective} on {algorithm.topology.name}, {result.size_bytes} B per "
             f"chunk before chunkup ({result.chunk_bytes:g} B per chunk), solver {result.solver}",
             f"sketch: {result.provenance.get('sketch_text', '')}"]
    lines += ["  " + stage_line(stage) for stage in result.stages]
    lb = f"{result.bound:.3f} us" if result.bound is not None else \
        "unknown (combining collectives: the routing stage bounds their AllGather/Broadcast half only)"
    gap = f"{100 * result.gap:.2f}%" if result.gap is not None else "unknown"
    lines.append(f"predicted time {result.predicted_us:.3f} us; lower bound {lb}; gap {gap}")
    if result.time_limit is not None:
        state = "time-limited: the budget cut a stage short" if result.time_limited else "no stage was cut short"
        lines.append(f"budget {result.time_limit:g} s for the whole run, {result.seconds:.2f} s used; {state}")
    return "\n".join(lines)


def write_report(result: MilpResult, directory: str | os.PathLike[str]) -> list[Path]:
    """report.md (stages, model sizes, times, status, predicted time), timeline.txt, timeline.png,
    algorithm.json and report.json in `directory` (created if needed). Each file is written atomically."""
    from collsynth.synth.timeline import plot_timeline, timeline_text

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    text = timeline_text(result.best)
    md = ["# MILP synthesis report", "", "```", summary(result), "```", "", "## Stages", "",
          "| stage | status | seconds | objective | bound | unit | gap | model |",
          "|---|---|---:|---:|---:|---|---:|---|"]
    for s in result.stages:
        md.append(f"| {s.name} | {s.status} | {s.seconds:.3f} | {_num(s.objective)} | {_num(s.bound)} | {s.unit} | "
                  f"{'' if s.gap is None else f'{100 * s.gap:.2f}%'} | {s.size or ''} |")
    for s in result.stages:
        families = getattr(s.size, "families", ())
        if families:
            md += ["", f"### {s.name}: rows per constraint family", ""]
            md += [f"- {fam}: {count}" for fam, count in families]
    md += ["", "## Timeline", "", "![timeline](timeline.png)", "", "```", text, "```", ""]
    report = {"predicted_us": result.predicted_us, "lower_bound_us": result.bound, "gap": result.gap,
              "status": str(result.status), "time_limit_s": result.time_limit, "time_limited": result.time_limited,
              "seconds": result.seconds, "solver": result.solver, "size_bytes": result.size_bytes,
              "chunk_bytes": result.chunk_bytes, "stages": [s.to_dict() for s in result.stages]}
    return [write_atomic(out / "report.md", "\n".join(md)),
            write_atomic(out / "timeline.txt", text + "\n"),
            write_atomic(out / "algorithm.json", result.best.to_json()),
            write_atomic(out / "report.json", json.dumps(report, indent=1)),
            plot_timeline(result.best, out / "timeline.png")]


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"
