"""One work item on a Dask worker: `run_item_isolated`, the task the coordinator submits.

Dask runs tasks in threads of a long-lived worker process, where neither a signal-based time limit nor a
fresh solver context is possible. So the item runs in a fresh process of its own (`isolate.run_in_fresh_process`),
killed with everything it started when the item's time limit passes or the worker dies. The process runs
`pipeline.run_item` exactly as a local build does, so local and Dask builds give the same entries.
"""

from __future__ import annotations

import collsynth
from collsynth.catalog.plan import WorkItem
from collsynth.catalog.results import ItemResult, timed_out

COLLSYNTH_VERSION = collsynth.__version__  # what the coordinator asks a worker for before it sends items


def run_item_isolated(item: WorkItem, timeout_s: float) -> ItemResult:
    """`pipeline.run_item(item)` in a fresh process, ended after `timeout_s` (the Dask task's body)."""
    from collsynth.catalog.isolate import FreshProcessTimeout, run_in_fresh_process
    from collsynth.catalog.pipeline import run_item

    try:
        result = run_in_fresh_process(run_item, item, timeout_s=timeout_s)
    except FreshProcessTimeout:
        return timed_out(item, timeout_s)
    except Exception as exc:  # the item's process crashed (out of memory, a signal): record why
        return ItemResult(item.key, False, f"its process on the Dask worker failed: {exc}")
    if not isinstance(result, ItemResult):
        return ItemResult(item.key, False, f"its process returned {type(result).__name__}, not an ItemResult")
    return result
