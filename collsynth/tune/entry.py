"""Tuning one catalog entry (one algorithm or library program) over a plan's sizes: the records the catalog
keeps per size, and the size ranges over which one configuration stays the best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from collsynth.runtime import execute
from collsynth.topologies import Topology
from collsynth.tune.evaluate import Evaluator
from collsynth.tune.search import tune_sizes
from collsynth.tune.space import Candidate, Config, Grid

# The catalog's grid: every protocol, merge mode and threadblock layout; up to 4 instances (more rarely
# pays on one node and multiplies threadblocks past what runtimes accept). The catalog descends only from
# the best protocol's start (warm-started from the previous size): about a third of the evaluations.
CATALOG_GRID = Grid(instances=(1, 2, 3, 4))
CATALOG_DESCENTS = 1


def tune_entry(candidate: Candidate, topology: Topology, collective: str, sizes: Sequence[int], *,
               dtype: str = "float32", grid: Grid = CATALOG_GRID) -> list[dict[str, Any]]:
    """Per size: {requested_bytes, size_bytes, config, time_us, busbw_GBps, evaluations}. Every distinct
    configuration picked is run once through the reference interpreter; a size whose pick fails it (or that
    nothing could run) is left out."""
    evaluator = Evaluator(topology, [candidate], dtype=dtype)
    run = tune_sizes(evaluator, collective, sorted(sizes), grid, descents=CATALOG_DESCENTS)
    checked: dict[Config, bool] = {}
    records = []
    for result in run.results:
        best = result.best
        if best is None or not math.isfinite(result.timing.time_us):
            continue
        if best not in checked:
            checked[best] = execute(evaluator.ir(best), "cpu").passed
        if not checked[best]:
            continue
        records.append({"requested_bytes": result.size, "size_bytes": result.timing.size_bytes,
                        "config": best.to_dict(), "time_us": result.timing.time_us,
                        "busbw_GBps": result.timing.busbw_GBps, "evaluations": result.evaluations})
    if run.interrupted:
        raise KeyboardInterrupt
    return records


def config_ranges(records: Sequence[dict[str, Any]]) -> list[tuple[int, int, dict[str, Any]]]:
    """Consecutive sizes with the same tuned configuration merged: (first size, last size, configuration)."""
    ranges: list[tuple[int, int, dict[str, Any]]] = []
    for record in sorted(records, key=lambda r: r["size_bytes"]):
        config = {k: v for k, v in record["config"].items() if k != "algorithm"}
        if ranges and ranges[-1][2] == config:
            ranges[-1] = (ranges[-1][0], record["size_bytes"], config)
        else:
            ranges.append((record["size_bytes"], record["size_bytes"], config))
    return ranges
