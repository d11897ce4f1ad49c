"""The tuning report: a table per size, the search (every evaluation's time, best so far) and busbw vs size."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from collsynth.core.files import atomic_path, write_atomic
from collsynth.core.units import format_size
from collsynth.tune.search import TuneRun


def table(run: TuneRun) -> str:
    """One line per size: the best configuration, its time and busbw, and the evaluations spent."""
    lines = [f"# tuned {run.collective} on {run.topology}: {len(run.candidates)} candidates, "
             f"{run.evaluations} evaluations",
             f"# {'size':>8}  {'time (us)':>11}  {'busbw':>7}  {'evals':>5}  {'secs':>6}  best configuration"]
    for r in run.results:
        best = r.best.label() if r.best else "(nothing runs)"
        time_us = f"{r.timing.time_us:11.2f}" if math.isfinite(r.timing.time_us) else f"{'-':>11}"
        lines.append(f"  {format_size(r.size):>8}  {time_us}  {r.timing.busbw_GBps:7.2f}  {r.evaluations:>5}  "
                     f"{r.seconds:6.2f}  {best}")
    if run.interrupted:
        lines.append("# interrupted: the sizes above were tuned, the rest were not")
    return "\n".join(lines)


def write_report(run: TuneRun, directory: str | os.PathLike[str]) -> list[Path]:
    """tune.json, tune.md, search.png and busbw.png under `directory` (each written atomically)."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    paths = [write_atomic(root / "tune.json", json.dumps(run.to_dict(), indent=1) + "\n")]
    plots = []
    if run.results:
        plots = [_plot_search(run, root / "search.png"), _plot_busbw(run, root / "busbw.png")]
    body = [f"# Tuning {run.collective} on {run.topology}", "", "```", table(run), "```", ""]
    body += [f"![{p.stem}]({p.name})" for p in plots]
    paths.append(write_atomic(root / "tune.md", "\n".join(body) + "\n"))
    return paths + plots


def _plot_search(run: TuneRun, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    for r in run.results:
        times = [t for _, t in r.trace]
        best = min((t for t in times if math.isfinite(t)), default=math.inf)
        if not math.isfinite(best):
            continue
        rel = [t / best if math.isfinite(t) else float("nan") for t in times]
        so_far, low = [], math.inf
        for t in times:
            low = min(low, t)
            so_far.append(low / best)
        line = ax.plot(range(1, len(rel) + 1), so_far, label=format_size(r.size))[0]
        ax.scatter(range(1, len(rel) + 1), rel, s=6, color=line.get_color(), alpha=0.35)
    ax.set_yscale("log")
    ax.set_xlabel("evaluation")
    ax.set_ylabel("time / best time of the size")
    ax.set_title(f"tuning search: {run.collective} on {run.topology} (dots: evaluations, lines: best so far)")
    ax.legend(fontsize=7, ncol=2)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path


def _plot_busbw(run: TuneRun, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    done = [r for r in run.results if r.best is not None]
    ax.plot([r.timing.size_bytes or r.size for r in done], [r.timing.busbw_GBps for r in done], "o-", label="tuned")
    by_candidate: dict[str, list[tuple[int, float]]] = {}
    for r in done:
        best: dict[str, float] = {}
        for config, t in r.trace:
            if math.isfinite(t) and t < best.get(config.algorithm, math.inf):
                best[config.algorithm] = t
        for name, t in best.items():
            by_candidate.setdefault(name, []).append((r.timing.size_bytes or r.size, r.timing.busbw_GBps
                                                      * r.timing.time_us / t))
    for name, points in sorted(by_candidate.items()):
        ax.plot([p[0] for p in points], [p[1] for p in points], ".--", alpha=0.6, label=f"best seen: {name}")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{run.collective} on {run.topology}: tuned busbw vs size")
    ax.legend(fontsize=6)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=110)
    plt.close(fig)
    return path
