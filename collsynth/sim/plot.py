"""busbw vs message size, one line per algorithm, in one figure (matplotlib, no display needed)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

from collsynth.collectives.spec import display_name
from collsynth.core.files import atomic_path
from collsynth.sim.nccl import SimError
from collsynth.sim.simulate import SimResult

_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}


def _size_label(nbytes: float) -> str:
    for unit, factor in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= factor:
            value = nbytes / factor
            return f"{value:.0f}{unit}" if value == int(value) else f"{value:.1f}{unit}"
    return f"{nbytes:.0f}"


def plot_busbw(results: Sequence[SimResult], path: str | os.PathLike[str], *, title: str | None = None) -> Path:
    """Draw busbw (GB/s) against size (bytes, log2 axis) for every result into `path` (.png, .svg, .pdf);
    written to a temporary file first and renamed into place."""
    if not results:
        raise SimError("nothing to plot: give at least one simulated algorithm")
    target = Path(path)
    fmt = _FORMATS.get(target.suffix.lower())
    if fmt is None:
        raise SimError(f"cannot plot to {target}: use a .png, .svg or .pdf file name")
    directory = target.parent if str(target.parent) else Path(".")
    if not directory.is_dir():
        raise SimError(f"cannot plot to {target}: directory {directory} does not exist")

    from matplotlib.figure import Figure  # a bare Figure renders to files without pyplot or a display

    figure = Figure(figsize=(8, 5), layout="constrained")
    axes = figure.add_subplot()
    markers = "os^vD<>ph*"
    for i, result in enumerate(results):
        sizes = [row.size_bytes for row in result.rows if row.size_bytes > 0]
        busbw = [row.busbw_GBps for row in result.rows if row.size_bytes > 0]
        axes.plot(sizes, busbw, marker=markers[i % len(markers)], markersize=4, label=result.algorithm)
    axes.set_xscale("log", base=2)
    ticks = sorted({row.size_bytes for result in results for row in result.rows if row.size_bytes > 0})
    if ticks:
        step = max(1, math.ceil(len(ticks) / 11))  # at most 11 labels keep the axis readable
        axes.set_xticks(ticks[::step], [_size_label(t) for t in ticks[::step]])
        axes.minorticks_off()
    axes.set_xlabel("size (bytes, nccl-tests size column)")
    axes.set_ylabel("busbw (GB/s)")
    first = results[0]
    default_title = f"{display_name(first.collective)} on {first.topology} ({first.ngpus} ranks, {first.dtype})"
    axes.set_title(title or default_title)
    axes.grid(True, which="major", alpha=0.3)
    axes.legend(loc="best", fontsize="small")
    with atomic_path(target) as tmp:
        figure.savefig(tmp, format=fmt, dpi=120)
    return target
