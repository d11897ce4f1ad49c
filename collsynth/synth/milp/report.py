"""The MILP pipeline's report directory: report.md, timeline.txt/.png, algorithm.json, report.json."""

from __future__ import annotations

import json
import os
from pathlib import Path

from collsynth.core.files import write_atomic
from collsynth.synth.milp.result import MilpResult, summary


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
        families = s.size.families if s.size is not None else ()
        if families:
            md += ["", f"### {s.name}: rows per constraint family", ""]
            md += [f"- {fam}: {count}" for fam, count in families]
    md += ["", "## Timeline", "", "![timeline](timeline.png)", "", "```", text, "```", ""]
    report = {"predicted_us": result.predicted_us, "lower_bound_us": result.bound, "gap": result.gap,
              "status": str(result.status), "time_limit_s": result.time_limit, "time_limited": result.time_limited,
              "seconds": result.seconds, "solver": result.solver, "size_bytes": result.size_bytes,
              "chunk_bytes": result.chunk_bytes, "stages": [s.to_dict() for s in result.stages]}
    timeline = plot_timeline(result.best, out / "timeline.png")  # before report.md, which links it
    return [write_atomic(out / "report.md", "\n".join(md)),
            write_atomic(out / "timeline.txt", text + "\n"),
            write_atomic(out / "algorithm.json", result.best.to_json()),
            write_atomic(out / "report.json", json.dumps(report, indent=1)),
            timeline]


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"
