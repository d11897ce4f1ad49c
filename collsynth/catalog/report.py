"""Markdown for catalog exports: how to load the directory, which algorithm wins which sizes, by how much."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from collsynth.collectives import display_name
from collsynth.core.units import format_size

if TYPE_CHECKING:
    from collsynth.catalog.export import ExportGroup


def export_report(groups: Sequence[ExportGroup], db_path: str | os.PathLike[str]) -> str:
    lines = [
        "# MSCCL/RCCL algorithm export",
        "",
        f"Written by `collsynth catalog export` from `{db_path}`. Times are the alpha-beta simulator's predictions "
        "(`collsynth sim`), not measurements.",
        "",
        "## Using it",
        "",
        "Each topology has its own directory. Load one before starting the job:",
        "",
        "```sh",
        "source <topology>/msccl.env     # sets MSCCL_ALGO_DIR (msccl-executor-nccl, RCCL), MSCCL_XML_FILES (legacy)",
        "```",
        "",
        "`<topology>/msccl-algorithms/` holds only XML files (the loaders parse every file there). Each file's "
        "`minBytes`/`maxBytes` is the size range it serves (the larger of a rank's two buffers, in bytes; "
        "`maxBytes=0` means no upper limit); ranges of one collective never overlap. Boundaries sit at the "
        "simulated crossover between neighbouring winners; below the smallest and above the largest cataloged "
        "size the end winners are extended. A call is served only if its element count is a multiple of the "
        "file's `nchunksperloop` (listed below); otherwise NCCL/RCCL run it.",
        "",
    ]
    for group in groups:
        lines += _group_section(group)
    return "\n".join(lines) + "\n"


def _group_section(group: ExportGroup) -> list[str]:
    kind = "in-place" if group.inplace else "out-of-place"
    lines = [f"## {display_name(group.collective)} on {group.topology.name} "
             f"({group.topology.num_ranks} ranks, {group.dtype}, {kind})", "",
             f"{len(group.candidates)} verified candidates; {len(group.ranges)} size ranges.", "",
             "| sizes (bytes) | algorithm | source | C / S / R | protocol | nchunksperloop | grid sizes won |",
             "|---|---|---|---|---|---|---|"]
    for size_range in group.ranges:
        entry = group.entry(size_range.winner)
        upper = "no limit" if size_range.max_bytes == 0 else f"{size_range.max_bytes:,}"
        shape = " / ".join("-" if v is None else str(v) for v in (entry.chunks, entry.steps, entry.rounds))
        lines.append(f"| {size_range.min_bytes:,} .. {upper} | `{entry.name}` | {entry.source} | {shape} | "
                     f"{group.compile_label(size_range.winner)} | "
                     f"{entry.ir_stats.get('nchunksperloop', '?')} | "
                     f"{format_size(size_range.first_size)} .. {format_size(size_range.last_size)} |")
    lines += ["", f"![busbw of the winners](plots/{group.slug}.png)", "",
              "| size | winner | time (us) | busbw (GB/s) | runner-up | runner-up slower by |",
              "|---:|---|---:|---:|---|---:|"]
    for w in group.winners:
        point = next(p for p in group.points[w.winner] if p.size_bytes == w.size_bytes)
        runner = f"`{group.entry(w.runner_up).name}`" if w.runner_up else "-"
        margin = f"{100 * w.margin:.1f} %" if w.margin is not None else "-"
        lines.append(f"| {format_size(w.size_bytes)} | `{group.entry(w.winner).name}` | {w.time_us:.2f} | "
                     f"{point.busbw_GBps:.2f} | {runner} | {margin} |")
    lines.append("")
    return lines
