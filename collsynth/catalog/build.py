"""Building a catalog from a plan: resumable, interruptible, parallel, shareable.

- Resumable: items already in the database (by key) are skipped; entries of finished items that lack a
  size of the plan's grid are simulated again from their stored XML (cheap) instead of redoing the item.
- Parallel: `jobs` > 1 runs items in a ProcessPoolExecutor (spawned workers); `cluster` runs them on a Dask
  cluster (collsynth.catalog.dask_build). Either way the parent alone writes the database, one short
  transaction per finished item.
- Several builders on one database: before an item runs, the builder claims it in the `claims` table; an
  item claimed by another live builder is left to it while that builder lives. A builder refreshes its claims
  (a heartbeat) every quarter of the lease `stale_after_s`; a claim whose heartbeat is older than the lease, or
  whose builder ran on this host and is gone, is taken over at once. At the end a builder waits for the items
  other builders still hold (taking over any whose builder dies); with `wait_for_others=False` it returns and
  the summary counts them (`catalog build` then exits 1).
- Ctrl-C (or SIGTERM): workers ignore SIGINT, the parent stops submitting, terminates its workers and
  releases its claims; every item finished before that stays recorded. Then KeyboardInterrupt propagates.
  Workers also get SIGTERM if the builder dies (Linux parent-death signal).
- Time limit per item (`limits.item_timeout_s`): an item still running then is recorded as failed (timed
  out); serial builds stop it with SIGALRM, parallel builds restart the worker pool.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from collsynth.catalog.db import Catalog, builder_owner
from collsynth.catalog.expand import expand_plan
from collsynth.catalog.isolate import new_pool, stop_pool
from collsynth.catalog.plan import DEFAULT_ITEM_TIMEOUT_S, Plan, WorkItem
from collsynth.catalog.results import ItemResult, timed_out
from collsynth.catalog.store import load_xml_text
from collsynth.core.errors import CollsynthError
from collsynth.core.signals import terminate_as_interrupt

DEFAULT_STALE_AFTER_S = 60.0  # the claim lease: a builder's heartbeat comes every quarter of it
WAIT_POLL_S = 0.5  # how often a builder that waits for other builders' items looks again

# run(pending, claim, record, timeout_s): runs the items it can claim and records each result
Runner = Callable[[Sequence[WorkItem], Callable[[WorkItem], bool], Callable[[WorkItem, "ItemResult"], None], float],
                  None]


@dataclass(frozen=True)
class BuildEvent:
    """Progress of a build: kind is 'skip' (done earlier), 'claimed' (another builder has it), 'start',
    'done' (recorded; `result` set) or 'resimulated' (new sizes for an earlier entry)."""

    kind: str
    item: WorkItem | None
    message: str = ""
    result: ItemResult | None = None


@dataclass(frozen=True)
class BuildSummary:
    items: int
    skipped: int
    claimed_elsewhere: int
    ran: int
    failed_items: int
    entries_ok: int
    entries_failed: int
    resimulated: int
    seconds: float

    def __str__(self) -> str:
        return (f"{self.items} items: {self.ran} run, {self.skipped} already done, {self.claimed_elsewhere} left to "
                f"another builder; {self.entries_ok} entries verified, {self.entries_failed} failed, "
                f"{self.failed_items} items failed; {self.resimulated} entries re-simulated for new sizes; "
                f"{self.seconds:.1f} s")


def build_catalog(plan: Plan, db_path: str | os.PathLike[str], *, jobs: int = 1, cluster: str | None = None,
                  retry_failed: bool = False, on_event: Callable[[BuildEvent], None] | None = None,
                  stale_after_s: float = DEFAULT_STALE_AFTER_S, wait_for_others: bool = True,
                  target: str | None = None) -> BuildSummary:
    """Run every work item of `plan` that the database does not have yet and record the results. `cluster`
    ('tcp://HOST:PORT' or 'local:N') runs the items on Dask; it is reached and checked before the database
    is created or changed. `target` (a runtime, collsynth.core.targets) compiles every entry for its limits."""
    from collsynth.catalog.pipeline import with_target

    items = with_target(expand_plan(plan), target)
    options: dict[str, Any] = {"jobs": jobs, "retry_failed": retry_failed, "on_event": on_event,
                               "stale_after_s": stale_after_s, "item_timeout_s": plan.item_timeout_s,
                               "wait_for_others": wait_for_others}
    with terminate_as_interrupt():  # from here on SIGTERM is Ctrl-C: finished work is kept
        if cluster is None:
            with Catalog(db_path, create=True) as catalog:
                return run_items(catalog, items, **options)
        from collsynth.catalog.dask_build import DaskRunner, parse_cluster

        Catalog.check_creatable(db_path)
        with DaskRunner(parse_cluster(cluster)) as runner, Catalog(db_path, create=True) as catalog:
            return run_items(catalog, items, runner=runner, **options)


def run_items(catalog: Catalog, items: Sequence[WorkItem], *, jobs: int = 1, retry_failed: bool = False,
              on_event: Callable[[BuildEvent], None] | None = None, stale_after_s: float = DEFAULT_STALE_AFTER_S,
              item_timeout_s: float = DEFAULT_ITEM_TIMEOUT_S, runner: Runner | None = None,
              wait_for_others: bool = True) -> BuildSummary:
    """The build loop on an open catalog (build_catalog's body; the regression suite reuses it)."""
    timeout_s = item_timeout_s
    if jobs < 1:
        from collsynth.catalog.errors import CatalogError

        raise CatalogError(f"--jobs must be >= 1, got {jobs}")
    emit = on_event or (lambda event: None)
    started = time.perf_counter()
    finished = catalog.finished_keys(include_failed=not retry_failed)
    pending = [item for item in items if item.key not in finished]
    for item in items:
        if item.key in finished:
            emit(BuildEvent("skip", item, "done earlier"))
    owner = builder_owner()
    counts = {"ran": 0, "failed_items": 0, "ok": 0, "failed": 0}
    elsewhere: dict[str, WorkItem] = {}  # items another builder held when this one wanted them

    def claim(item: WorkItem) -> bool:
        if catalog.claim(item.key, owner, stale_after_s=stale_after_s):
            elsewhere.pop(item.key, None)
            emit(BuildEvent("start", item))
            return True
        if item.key not in elsewhere:
            emit(BuildEvent("claimed", item, "another builder is working on it"))
        elsewhere[item.key] = item
        return False

    def record(item: WorkItem, result: ItemResult) -> None:
        catalog.record(item, store_tuned_xml(catalog, result))
        counts["ran"] += 1
        counts["failed_items"] += not result.ok
        counts["ok"] += sum(entry.passed for entry in result.entries)
        counts["failed"] += sum(not entry.passed for entry in result.entries)
        emit(BuildEvent("done", item, result.message, result))

    run = runner or (_run_serial if jobs == 1 or len(pending) <= 1
                     else lambda todo, *rest: _run_parallel(todo, jobs, *rest))
    try:
        with terminate_as_interrupt(), _heartbeat(catalog, owner, stale_after_s):
            run(pending, claim, record, timeout_s)
            while elsewhere:
                # drop what the other builders finished; run what a dead builder left; wait for the rest
                done = catalog.finished_keys()
                for key in [key for key in elsewhere if key in done]:
                    del elsewhere[key]
                held = catalog.live_claims(elsewhere, owner, stale_after_s=stale_after_s)
                free = [item for key, item in elsewhere.items() if key not in held]
                if free:
                    run(free, claim, record, timeout_s)
                elif not wait_for_others:
                    break
                elif elsewhere:
                    time.sleep(WAIT_POLL_S)
    except BaseException:
        catalog.release_all(owner)  # Ctrl-C, SIGTERM or a crash: what is not recorded goes back to the pool
        raise
    resimulated = resimulate_missing(catalog, items, emit)
    return BuildSummary(items=len(items), skipped=len(items) - len(pending), claimed_elsewhere=len(elsewhere),
                        ran=counts["ran"], failed_items=counts["failed_items"], entries_ok=counts["ok"],
                        entries_failed=counts["failed"], resimulated=resimulated,
                        seconds=time.perf_counter() - started)


@contextmanager
def _heartbeat(catalog: Catalog, owner: str, lease_s: float) -> Iterator[None]:
    """Refresh `owner`'s claims from a thread (its own connection) every quarter lease while the body runs."""
    stop = threading.Event()
    interval = min(max(lease_s / 4, 0.05), 15.0)

    def beat() -> None:
        try:
            with Catalog(catalog.path) as own:
                while not stop.wait(interval):
                    own.heartbeat(owner)
        except (CollsynthError, sqlite3.Error):
            pass  # the database went away or stays locked: the claims go stale and other builders take over

    thread = threading.Thread(target=beat, name="collsynth-claims-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


class ItemTimeout(BaseException):
    """A work item ran past its time limit (a BaseException so the pipeline's error capture lets it through)."""



@contextmanager
def _alarm(seconds: float | None) -> Iterator[None]:
    """Raise ItemTimeout in this (main) thread after `seconds`; a no-op elsewhere or for None. An interval
    timer already running (e.g. pytest-timeout's) keeps its deadline and its handler."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    start = time.monotonic()
    outer_left, _ = signal.getitimer(signal.ITIMER_REAL)
    outer_deadline = start + outer_left if outer_left > 0 else None
    deadline = start + seconds
    previous = signal.getsignal(signal.SIGALRM)

    def handler(signum: int, frame: Any) -> None:
        now = time.monotonic()
        if now < deadline - 1e-3:  # the outer timer's deadline came first: let its handler act
            if callable(previous):
                previous(signum, frame)
            signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 1e-3))
            return
        raise ItemTimeout

    signal.signal(signal.SIGALRM, handler)
    first = min(deadline, outer_deadline) if outer_deadline is not None else deadline
    signal.setitimer(signal.ITIMER_REAL, max(first - start, 1e-3))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer_deadline is not None:
            signal.setitimer(signal.ITIMER_REAL, max(outer_deadline - time.monotonic(), 1e-3))


def _run_serial(pending: Iterable[WorkItem], claim: Callable[[WorkItem], bool],
                record: Callable[[WorkItem, ItemResult], None], timeout_s: float) -> None:
    from collsynth.catalog.pipeline import run_item

    for item in pending:
        if not claim(item):
            continue
        try:
            with _alarm(timeout_s):
                result = run_item(item)
        except ItemTimeout:
            result = timed_out(item, timeout_s)
        record(item, result)


def _run_parallel(pending: Sequence[WorkItem], jobs: int, claim: Callable[[WorkItem], bool],
                  record: Callable[[WorkItem, ItemResult], None], timeout_s: float) -> None:
    """Keep `jobs` items in flight. An item past its time limit is recorded as failed and the pool restarted
    (the only way to stop a running item); the other in-flight items are resubmitted. A worker that dies
    breaks the whole pool: its items are resubmitted once, and recorded as failed if it happens again."""
    from collsynth.catalog.pipeline import run_item

    queue = list(reversed(pending))
    resubmit: list[WorkItem] = []
    running: dict[Future[ItemResult], tuple[WorkItem, float]] = {}
    breaks: dict[str, int] = {}
    executor = new_pool(jobs)

    def restart_pool() -> ProcessPoolExecutor:
        for item, _ in running.values():
            breaks.setdefault(item.key, 0)  # resubmit without claiming again
            resubmit.append(item)
        running.clear()
        stop_pool(executor)
        return new_pool(jobs)

    failed_submits = 0
    try:
        while queue or resubmit or running:
            submit_failed = False
            while (queue or resubmit) and len(running) < jobs:
                item = resubmit.pop() if resubmit else queue.pop()
                if item.key in breaks or claim(item):  # resubmitted items are still claimed by this builder
                    try:
                        running[executor.submit(run_item, item)] = (item, time.monotonic())
                    except (BrokenProcessPool, OSError, RuntimeError):
                        # A worker died while we were submitting: not this item's fault (it keeps its claim
                        # and is not counted). The items in flight come back below as BrokenProcessPool
                        # and are counted there, so an item that keeps killing its worker is still caught.
                        breaks.setdefault(item.key, 0)
                        resubmit.append(item)
                        submit_failed = True
                        break
            if submit_failed and not running:
                failed_submits += 1
                if failed_submits > 3:
                    raise CollsynthError("the worker pool fails to start; retry with --jobs 1")
                executor = restart_pool()
                continue
            failed_submits = 0
            if not running:
                continue
            deadline = min(started for _, started in running.values()) + timeout_s
            done, _ = wait(running, timeout=max(0.0, deadline - time.monotonic()), return_when=FIRST_COMPLETED)
            broken = False
            for future in done:
                item, _ = running.pop(future)
                try:
                    result = future.result()
                except BrokenProcessPool:
                    broken = True
                    breaks[item.key] = breaks.get(item.key, 0) + 1
                    if breaks[item.key] < 2:
                        resubmit.append(item)
                        continue
                    result = ItemResult(item.key, False, "its worker process died twice (out of memory?)")
                except Exception as exc:  # e.g. a result that cannot be unpickled: record it, keep building
                    result = ItemResult(item.key, False, f"worker failed: {type(exc).__name__}: {exc}")
                record(item, result)
            now = time.monotonic()
            expired = [future for future, (_, started) in running.items() if now - started >= timeout_s]
            if expired or broken or submit_failed:
                for future in expired:
                    item, _ = running.pop(future)
                    record(item, timed_out(item, timeout_s))
                executor = restart_pool()
        executor.shutdown(wait=True)
    except BaseException:
        stop_pool(executor)  # workers still starting included: none outlives the build (core.signals)
        raise


def resimulate_missing(catalog: Catalog, items: Sequence[WorkItem],
                       emit: Callable[[BuildEvent], None] | None = None) -> int:
    """Simulate stored entries of `items` at the sizes of their item that they have no time for, and tune
    tuned entries at those sizes (one tuning per algorithm, shared by its variants, as the pipeline does)."""
    from collsynth.catalog.pipeline import simulate_points
    from collsynth.emit.msccl_xml import read_xml
    from collsynth.sim import dtype_info

    count = 0
    by_key = {item.key: item for item in items}
    retuned: dict[tuple[str, str], dict[str, Any] | None] = {}
    for entry in catalog.entries(status="ok"):
        item = by_key.get(entry.item_key)
        if item is None:
            continue
        type_name = dtype_info(item.dtype)[0]
        have = {point.requested_bytes for point in catalog.times(entry.id, type_name)}
        missing = [size for size in item.sizes if size not in have]
        if not missing:
            continue
        ir = read_xml(load_xml_text(catalog.root, entry.xml_sha256 or ""))
        catalog.add_times(entry.id, simulate_points(ir, item.topology, missing, item.dtype))
        key = (item.key, entry.name)
        if key not in retuned:
            retuned[key] = _tune_new_sizes(catalog, item, entry.name, entry.provenance, missing)
        if retuned[key] is not None:
            catalog.set_provenance(entry.id, retuned[key] or {})
        count += 1
        if emit:
            emit(BuildEvent("resimulated", item, f"{entry.name}: {len(missing)} new sizes"))
    return count


def _tune_new_sizes(catalog: Catalog, item: WorkItem, name: str, provenance: dict[str, Any],
                    sizes: Sequence[int]) -> dict[str, Any] | None:
    """The entry's provenance with tuning records for `sizes` added (None: the entry was not tuned, or its
    algorithm cannot be rebuilt); each new configuration's XML checked by the interpreter and stored."""
    from collsynth.catalog.pipeline import (
        LOWERING,
        TARGET_PARAM,
        TUNED_XML,
        _algorithm_candidate,
        _library_candidate,
        ir_name,
        tuning_grid,
    )
    from collsynth.catalog.plan import LIBRARY
    from collsynth.catalog.store import store_xml, xml_sha256
    from collsynth.schedule import Algorithm
    from collsynth.tune.entry import record_config, tune_entry_xml

    records = provenance.get("tuned")
    if not isinstance(records, list):
        return None
    if item.source == LIBRARY:
        candidate = _library_candidate(str(provenance.get("program", name)), item)
    elif provenance.get("tuned_algorithm_sha256"):
        text = load_xml_text(catalog.root, str(provenance["tuned_algorithm_sha256"]))
        candidate = _algorithm_candidate(name, Algorithm.from_json(text), provenance.get(LOWERING))
    else:
        return None
    nearest = min(records, key=lambda r: abs(int(r["size_bytes"]) - min(sizes)), default=None)
    warm = record_config(nearest, candidate.name) if nearest is not None else None
    new, by_config = tune_entry_xml(candidate, item.topology, item.collective_name, sizes, dtype=item.dtype,
                                    name=ir_name(item.topology, item.collective_name, name, item.variants[0]),
                                    warm=warm, grid=tuning_grid(item.topology), target=item.param(TARGET_PARAM))
    for record in new:
        record["xml_sha256"] = xml_sha256(by_config[record["config_key"]])
    for text in by_config.values():
        store_xml(catalog.root, text)
    merged = sorted([*records, *new], key=lambda r: int(r["requested_bytes"]))
    return {k: v for k, v in {**provenance, "tuned": merged}.items() if k != TUNED_XML}


def store_tuned_xml(catalog: Catalog, result: ItemResult) -> ItemResult:
    """The tuned configurations' XML texts (and schedules) an item carries, written to the catalog's
    content-addressed store; the entries keep only their hashes."""
    from dataclasses import replace

    from collsynth.catalog.pipeline import TUNED_XML
    from collsynth.catalog.store import store_xml

    entries = []
    for entry in result.entries:
        texts = entry.provenance.get(TUNED_XML)
        if texts is None:
            entries.append(entry)
            continue
        for text in texts.values():
            store_xml(catalog.root, text)
        entries.append(replace(entry, provenance={k: v for k, v in entry.provenance.items() if k != TUNED_XML}))
    return replace(result, entries=tuple(entries))
