"""Timeline pictures of timed schedules: which chunk is on which link when.

`timeline_text` draws one row per link in plain text (one character per time slice, the chunk id's
last digit, `*` where several chunks share a slice); `plot_timeline` draws the same as a PNG with
matplotlib (one bar per transfer, labelled with its chunk). Both need sends with `start_us` set (MILP
schedules); other algorithms are drawn step by step with unit-length sends.
"""

from __future__ import annotations

import os
from pathlib import Path

from collsynth.core.enums import Op
from collsynth.core.files import atomic_path
from collsynth.schedule.algorithm import REDUCE, Algorithm

_Bar = tuple[int, int, int, Op, float, float]  # chunk, src, dst, op, start, duration


def _bars(algorithm: Algorithm) -> list[_Bar]:
    bars: list[_Bar] = []
    for t, step in enumerate(algorithm.steps):
        for send in step.sends:
            start = send.start_us if send.start_us is not None else float(t)
            duration = send.duration_us if send.duration_us is not None else 1.0
            bars.append((send.chunk, send.src, send.dst, send.op, start, duration))
    return bars


def timeline_text(algorithm: Algorithm, width: int = 96) -> str:
    """One row per link: `src->dst |....3333....|` with time running left to right."""
    bars = _bars(algorithm)
    if not bars:
        return "(no sends)"
    end = max(start + dur for *_, start, dur in bars)
    scale = width / end if end > 0 else 1.0
    rows: dict[tuple[int, int], list[str]] = {}
    for chunk, src, dst, op, start, dur in sorted(bars, key=lambda b: (b[1], b[2], b[4])):
        row = rows.setdefault((src, dst), [" "] * width)
        lo = min(width - 1, int(start * scale))
        hi = max(lo + 1, min(width, int(round((start + dur) * scale))))
        mark = str(chunk % 10) if op != REDUCE else "abcdefghij"[chunk % 10]
        for i in range(lo, hi):
            row[i] = mark if row[i] == " " else "*"
    label_width = max(len(f"{s}->{d}") for s, d in rows)
    unit = "us" if any(s.start_us is not None for _, s in algorithm.sends()) else "steps"
    lines = [f"timeline of {algorithm.name}: {len(bars)} sends, makespan {end:.3f} {unit} "
             f"(digit = chunk id mod 10; letters = reductions; * = overlap)"]
    for (src, dst), row in sorted(rows.items()):
        lines.append(f"{f'{src}->{dst}':>{label_width}} |{''.join(row)}|")
    axis = f"{'':>{label_width}}  0{'':{max(0, width - len(f'{end:.2f}') - 1)}}{end:.2f}"
    lines.append(axis)
    return "\n".join(lines)


def plot_timeline(algorithm: Algorithm, path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """A PNG Gantt chart (rows: links; bars: transfers labelled with their chunk). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bars = _bars(algorithm)
    links = sorted({(src, dst) for _, src, dst, *_ in bars})
    row_of = {link: i for i, link in enumerate(links)}
    height = max(2.5, 0.22 * len(links) + 1.2)
    fig, ax = plt.subplots(figsize=(12, height))
    cmap = plt.get_cmap("tab20")
    num_chunks = max(1, algorithm.collective.num_chunks)
    for chunk, src, dst, op, start, dur in bars:
        y = row_of[(src, dst)]
        color = cmap(chunk % 20)
        ax.broken_barh([(start, dur)], (y - 0.4, 0.8), facecolors=color, edgecolors="black", linewidth=0.3,
                       hatch="//" if op == REDUCE else None)
        if len(bars) <= 400:
            ax.text(start + dur / 2, y, str(chunk), ha="center", va="center", fontsize=6)
    ax.set_yticks(range(len(links)))
    ax.set_yticklabels([f"{s}->{d}" for s, d in links], fontsize=6)
    ax.invert_yaxis()
    ax.set_xlabel("time (us)" if any(s.start_us is not None for _, s in algorithm.sends()) else "step")
    ax.set_ylabel("link")
    ax.set_title(title or f"{algorithm.name} ({num_chunks} chunks)", fontsize=9)
    ax.grid(axis="x", linewidth=0.3)
    fig.tight_layout()
    out = Path(path)
    try:
        with atomic_path(out) as tmp:
            fig.savefig(tmp, dpi=120, format="png")
    finally:
        plt.close(fig)
    return out
