"""Tuning one catalog entry (one algorithm or library program) over a plan's sizes: the records the catalog
keeps per size, and the size ranges over which one configuration stays the best."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
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
    return tune_entry_xml(candidate, topology, collective, sizes, dtype=dtype, grid=grid)[0]


def tune_entry_xml(candidate: Candidate, topology: Topology, collective: str, sizes: Sequence[int], *,
                   dtype: str = "float32", grid: Grid = CATALOG_GRID, name: str = "", warm: Config | None = None,
                   target: str | None = None) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """`tune_entry`'s records, and the MSCCL-IR XML of every distinct tuned configuration (key: the record's
    `config_key`), each written only after the reference interpreter passed it. `name`: the XML's name
    attribute stem; `warm`: the configuration the first size's descent starts from; `target`: the runtime every
    configuration is compiled (split) for, so that no configuration it refuses is picked."""
    from collsynth.emit.msccl_xml import ir_to_xml

    evaluator = Evaluator(topology, [candidate], dtype=dtype, target=target)
    run = tune_sizes(evaluator, collective, sorted(sizes), grid, descents=CATALOG_DESCENTS, warm=warm)
    checked: dict[Config, bool] = {}
    xmls: dict[str, str] = {}
    records = []
    for result in run.results:
        best = result.best
        if best is None or not math.isfinite(result.timing.time_us):
            continue
        if best not in checked:
            ir = evaluator.ir(best)
            checked[best] = execute(ir, "cpu").passed
            if checked[best]:
                stem = name or candidate.name
                xmls[config_key(best)] = ir_to_xml(replace(ir, name=f"{stem}-tuned-{config_key(best)}"))
        if not checked[best]:
            continue
        records.append({"requested_bytes": result.size, "size_bytes": result.timing.size_bytes,
                        "config": best.to_dict(), "config_key": config_key(best), "time_us": result.timing.time_us,
                        "busbw_GBps": result.timing.busbw_GBps, "evaluations": result.evaluations})
    if run.interrupted:
        raise KeyboardInterrupt
    return records, xmls


def config_key(config: Config) -> str:
    """A short stable name of a configuration's resource values (the algorithm left out): e.g. LL-i2-contiguous."""
    return (f"{config.protocol}-i{config.instances}-{config.merge}{'' if config.fusion else '-nofuse'}"
            f"{'' if config.pair_threadblocks else '-tbconn'}{'-timed' if config.timed_order else ''}"
            f"{'-timedmerge' if config.timed_merge else ''}")


def record_config(record: dict[str, Any], algorithm: str) -> Config:
    """The configuration of a tuning record, for the candidate named `algorithm`."""
    return Config.from_dict({**record["config"], "algorithm": algorithm})


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
