"""The report of a Pareto sweep: frontier.json, one JSON per algorithm, report.md and frontier.png.

Every file is written atomically (temp file in the same directory, then `os.replace`), so a reader (or
a Ctrl-C) never sees half a file; `write_progress` rewrites frontier.json and the new algorithms after
every point of a running sweep.
"""

from __future__ import annotations

import json
import os
import re
from fractions import Fraction
from pathlib import Path
from typing import Any

from collsynth.collectives import Collective, display_name
from collsynth.core.files import atomic_path, write_atomic
from collsynth.schedule import FrontierPoint, SynthesisResult
from collsynth.synth.pareto import sweep_document
from collsynth.topologies import Topology

ALGORITHMS_DIR = "algorithms"
# Message sizes for the "which point when" table (bytes).
SIZES = (1 << 10, 32 << 10, 1 << 20, 32 << 20, 1 << 30)


def cost_model(topology: Topology) -> tuple[float, float]:
    """(alpha in us, beta in us per MB per round) for the model cost S*alpha + (R/C)*size*beta: the slowest
    link's alpha, and the time one bandwidth unit of a link takes per MB (a round moves one chunk per unit)."""
    if not topology.link_list:
        return 0.0, 0.0
    alpha = max(link.alpha_us for link in topology.link_list)
    beta = max(link.beta_us_per_mb * link.bandwidth for link in topology.link_list)
    return alpha, beta


def predicted_us(point: FrontierPoint, alpha: float, beta: float, size_bytes: int) -> float:
    return point.steps * alpha + float(point.rounds_per_chunk) * (size_bytes / (1 << 20)) * beta


def algorithm_file(point: FrontierPoint) -> str:
    name = point.algorithm.name if point.algorithm is not None else f"c{point.chunks}-s{point.steps}-r{point.rounds}"
    return f"{ALGORITHMS_DIR}/{re.sub(r'[^A-Za-z0-9._-]', '_', name)}.json"


def frontier_document(result: SynthesisResult) -> dict[str, Any]:
    """frontier.json: the `--json` document plus R/C and the algorithm file of every point."""
    doc = sweep_document(result)
    pareto = set(result.frontier)
    doc["frontier"] = [{**p.to_dict(), "rounds_per_chunk": str(p.rounds_per_chunk), "algorithm": algorithm_file(p)}
                       for p in result.frontier]
    doc["points"] = [{**p.to_dict(), "rounds_per_chunk": str(p.rounds_per_chunk), "pareto": p in pareto,
                      "seconds": round(p.seconds, 3), "algorithm": algorithm_file(p)} for p in result.points]
    return doc


def write_progress(result: SynthesisResult, directory: str | os.PathLike[str]) -> list[Path]:
    """frontier.json and any algorithm file not written yet (cheap enough to call after every point)."""
    out = Path(directory)
    (out / ALGORITHMS_DIR).mkdir(parents=True, exist_ok=True)
    written = []
    for point in result.points:
        path = out / algorithm_file(point)
        if point.algorithm is not None and not path.exists():
            written.append(write_atomic(path, point.algorithm.to_json()))
    written.append(write_atomic(out / "frontier.json", json.dumps(frontier_document(result), indent=1)))
    return written


def write_report(result: SynthesisResult, directory: str | os.PathLike[str]) -> list[Path]:
    """Everything: frontier.json, algorithms/*.json, report.md and frontier.png."""
    out = Path(directory)
    written = write_progress(result, out)
    # the picture first: report.md links it, so an interrupt between the two never leaves a dangling link
    written.append(plot_frontier(result, out / "frontier.png"))
    written.append(write_atomic(out / "report.md", markdown_report(result)))
    return written


def _ratio(value: Fraction) -> str:
    return str(value) if value.denominator == 1 else f"{value} ({float(value):.3f})"


def _ratio_bound(result: SynthesisResult) -> Fraction:
    """A sweep's rounds-per-chunk lower bound (exact)."""
    return Fraction(result.bound if result.bound is not None else 0)


def _problem(result: SynthesisResult) -> tuple[Topology, Collective, int]:
    """What a sweep was asked: topology, collective (one chunk per slot), and its step lower bound."""
    assert result.topology is not None and result.collective is not None and result.steps_bound is not None
    return result.topology, result.collective, result.steps_bound


def markdown_report(result: SynthesisResult) -> str:
    topo, coll, steps_lb = _problem(result)
    name = display_name(coll.name)
    alpha, beta = cost_model(topo)
    pareto = result.frontier
    root = f" (root {coll.root})" if coll.root is not None else ""
    lines = [
        f"# {name}{root} on {topo.name}: latency-bandwidth frontier",
        "",
        f"Synthesized with the SCCL encoding (z3). An algorithm with **C** chunks per buffer, **S** steps and "
        f"**R** rounds costs `S*alpha + (R/C)*size*beta`: S is its latency, R/C its bandwidth cost. A point is "
        f"Pareto-optimal when no other point has fewer-or-equal steps and lower-or-equal R/C with one strictly "
        f"lower. Sweep: {result.stopped}, {len(result.tried)} solver calls, {result.seconds:.1f} s.",
        "",
        "## Lower bounds",
        "",
        f"- steps >= **{steps_lb}** (the longest shortest path some data must travel)",
        f"- R/C >= **{_ratio(_ratio_bound(result))}** (multi-commodity flow LP over link and "
        f"switch bandwidths, HiGHS)"
        + (" - met" if result.bound_met else " - not met by any point found"),
        "",
        "## Pareto-optimal algorithms",
        "",
        f"Cost model from the topology's links: alpha = {alpha:g} us, beta = {beta:g} us/MB per round.",
        "",
        "| C | S | R | latency (S*alpha) | bandwidth (R/C) | 1 MB (us) | status | solve (s) | algorithm |",
        "|---:|---:|---:|---|---|---:|---|---:|---|",
    ]
    for p in pareto:
        lines.append(f"| {p.chunks} | {p.steps} | {p.rounds} | {p.steps} alpha = {p.steps * alpha:.2f} us | "
                     f"{_ratio(p.rounds_per_chunk)} | {predicted_us(p, alpha, beta, 1 << 20):.1f} | {p.status} | "
                     f"{p.seconds:.2f} | [{Path(algorithm_file(p)).name}]({algorithm_file(p)}) |")
    if not pareto:
        lines.append("| | | | | | | | | (no algorithm found) |")
    if pareto:
        lines += ["", "## Which algorithm when", "", "| size | best point (C, S, R) | predicted (us) |",
                  "|---:|---|---:|"]
        for size in SIZES:
            best = min(pareto, key=lambda p: predicted_us(p, alpha, beta, size))
            lines.append(f"| {_size(size)} | ({best.chunks}, {best.steps}, {best.rounds}) | "
                         f"{predicted_us(best, alpha, beta, size):.1f} |")
    lines += ["", "![frontier](frontier.png)", "", "## Every point found", "",
              "The fewest rounds found for each (C, S) the sweep examined; dominated ones included.", "",
              "| C | S | R | R/C | status | Pareto | solve (s) |", "|---:|---:|---:|---|---|---|---:|"]
    for p in sorted(result.points, key=lambda p: (p.chunks, p.steps)):
        lines.append(f"| {p.chunks} | {p.steps} | {p.rounds} | {_ratio(p.rounds_per_chunk)} | {p.status} | "
                     f"{'yes' if p in pareto else ''} | {p.seconds:.2f} |")
    lines += ["", "## Solver calls", "",
              "Each call asks: an algorithm with C chunks, S steps and at most R rounds? For sat, R is the rounds "
              "of the algorithm found. A timeout is not a proof of anything.", "",
              "| # | C | S | R | result | seconds |" + (" part |" if any(a.part for a in result.tried) else ""),
              "|---:|---:|---:|---:|---|---:|" + ("---|" if any(a.part for a in result.tried) else "")]
    for i, a in enumerate(result.tried, 1):
        lines.append(f"| {i} | {a.chunks} | {a.steps} | {a.rounds} | {a.result} | {a.seconds:.2f} |"
                     + (f" {a.part or ''} |" if any(x.part for x in result.tried) else ""))
    lines += ["", f"Topology `{topo.name}`: {topo.num_ranks} ranks, {len(topo.link_list)} links, "
              f"{len(topo.switches)} switches, fingerprint `{topo.fingerprint()}`.", ""]
    return "\n".join(lines)


def _size(size: int) -> str:
    for unit, factor in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if size >= factor:
            return f"{size // factor} {unit}"
    return f"{size} B"


def plot_frontier(result: SynthesisResult, path: str | os.PathLike[str]) -> Path:
    """Steps against rounds per chunk: every point found, the Pareto staircase, and both lower bounds."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    topo, coll, steps_lb = _problem(result)
    target = Path(path)
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=120)
    pareto = result.frontier
    others = [p for p in result.points if p not in set(pareto)]
    xs = [p.steps for p in result.points] + [steps_lb]
    ys = [float(p.rounds_per_chunk) for p in result.points] + [float(_ratio_bound(result))]
    x_hi = max(xs) + 1
    y_hi = max(ys) * 1.15 + 0.1
    s_lb, r_lb = steps_lb, float(_ratio_bound(result))
    x_lo = max(0, s_lb - 1) - 0.3
    # what the lower bounds rule out
    ax.fill_between([x_lo, s_lb], 0, y_hi, color="#e6e6e6", lw=0, zorder=0, label="ruled out by the bounds")
    ax.fill_between([s_lb, x_hi], 0, r_lb, color="#e6e6e6", lw=0, zorder=0)
    ax.axvline(s_lb, color="#7f7f7f", ls="--", lw=1.2, label=f"step lower bound ({s_lb})")
    ax.axhline(r_lb, color="#d62728", ls="--", lw=1.2,
               label=f"bandwidth lower bound ({_ratio_bound(result)})")
    if others:
        ax.scatter([p.steps for p in others], [float(p.rounds_per_chunk) for p in others], s=26, color="#a6a6a6",
                   zorder=3, label="dominated points")
    if pareto:
        # the staircase: what the Pareto points (and anything slower) achieve lies above and to its right
        stair_x, stair_y = [pareto[0].steps], [y_hi]
        for p in pareto:
            stair_x += [p.steps, p.steps]
            stair_y += [stair_y[-1], float(p.rounds_per_chunk)]
        stair_x.append(x_hi)
        stair_y.append(float(pareto[-1].rounds_per_chunk))
        ax.fill_between(stair_x, stair_y, y_hi, color="#1f77b4", alpha=0.08, lw=0, zorder=1,
                        label="achieved (by a point at or below-left)")
        ax.plot(stair_x, stair_y, color="#1f77b4", lw=1.8, zorder=2)
        ax.scatter([p.steps for p in pareto], [float(p.rounds_per_chunk) for p in pareto], s=70, color="#1f77b4",
                   edgecolor="white", linewidth=1.2, zorder=4, label="Pareto-optimal")
        for p in pareto:
            ax.annotate(f"C={p.chunks} S={p.steps} R={p.rounds}\nR/C={p.rounds_per_chunk}",
                        (p.steps, float(p.rounds_per_chunk)), textcoords="offset points", xytext=(8, 6),
                        fontsize=8.5, color="#1f4e79", zorder=5)
    ax.set_xlim(x_lo, x_hi)
    ax.set_ylim(0, y_hi)
    ax.set_xticks(range(max(0, s_lb - 1), x_hi + 1))
    ax.set_xlabel("steps S (latency: S x alpha)")
    ax.set_ylabel("rounds per chunk R/C (bandwidth: R/C x size x beta)")
    root = f", root {coll.root}" if coll.root is not None else ""
    ax.set_title(f"{display_name(coll.name)}{root} on {topo.name}: "
                 f"latency-bandwidth frontier", fontsize=11)
    ax.grid(True, color="#eeeeee", lw=0.8)
    ax.set_axisbelow(True)
    ax.legend(loc="upper right", fontsize=8.5, framealpha=0.9)
    return _save_figure(fig, target)


def _save_figure(fig: Any, target: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    try:
        with atomic_path(target) as tmp:
            fig.savefig(tmp, format="png")
    finally:
        plt.close(fig)
    return target


