"""Catalog builds on a Dask cluster (dask.distributed): `catalog build PLAN --cluster tcp://HOST:PORT|local:N`.

The coordinating process (this one) claims items, submits each as a future (`dask_item.run_item_isolated`:
the item runs in a fresh process on a worker, under its time limit) and records each result as it comes back;
it alone writes SQLite and the XML store, one short transaction per item, exactly as a local build does.
At most two items per worker thread are in flight, so several builders can still share one database.

Faults: a worker that dies mid-item (kill -9, out of memory) makes the scheduler run the item again on
another worker; after `MAX_WORKER_DEATHS` deaths of workers running it the item is recorded as failed with
the reason. Losing the scheduler stops the build with one line (CatalogError: exit 2); every item finished
before that stays recorded, and running the build again resumes it.

Bad input is refused before the database is created or changed: a malformed address, an unreachable
scheduler, a scheduler without workers, workers without collsynth (or with another version of it).
"""

from __future__ import annotations

import contextlib
import logging
import pkgutil
import re
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any

import collsynth
from collsynth.catalog.errors import CatalogError
from collsynth.catalog.plan import WorkItem
from collsynth.catalog.results import ItemResult

MAX_WORKER_DEATHS = 3  # workers that may die running one item before it is recorded as failed
CONNECT_TIMEOUT_S = 10.0
WORKERS_TIMEOUT_S = 60.0  # how long a scheduler may have no worker at the start
POLL_S = 1.0  # how often the coordinator looks at the scheduler connection while it waits for results
_FORM = "give tcp://HOST:PORT (a running `dask scheduler`) or local:N (N worker processes on this machine)"


class ClusterError(CatalogError):
    """The Dask cluster cannot be used (the message names the problem and the fix)."""


@dataclass(frozen=True)
class ClusterSpec:
    """Where the items run: an existing scheduler (`address`) or a LocalCluster of `workers` processes."""

    address: str | None = None
    workers: int = 0

    def __str__(self) -> str:
        return self.address or f"local:{self.workers}"


def parse_cluster(text: str) -> ClusterSpec:
    """'tcp://HOST:PORT' or 'local:N' -> ClusterSpec; anything else is a ClusterError naming the forms."""
    value = text.strip()
    local = re.fullmatch(r"local:(\d{1,4})", value)
    if local:
        workers = int(local.group(1))
        if not 1 <= workers <= 1024:
            raise ClusterError(f"--cluster {text!r}: N must be 1..1024")
        return ClusterSpec(workers=workers)
    remote = re.fullmatch(r"tcp://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(\d{1,5})", value)
    if remote is None or not 1 <= int(remote.group(2)) <= 65535:
        raise ClusterError(f"--cluster {text!r} is not a cluster address; {_FORM}")
    return ClusterSpec(address=value)


class DaskRunner:
    """A catalog `Runner` (see build.py) on a Dask cluster; a context manager that connects (starting a
    LocalCluster for local:N), checks the workers, and closes what it opened."""

    def __init__(self, spec: ClusterSpec, *, connect_timeout_s: float | None = None,
                 workers_timeout_s: float | None = None) -> None:
        self.spec = spec
        self.connect_timeout_s = CONNECT_TIMEOUT_S if connect_timeout_s is None else connect_timeout_s
        self.workers_timeout_s = WORKERS_TIMEOUT_S if workers_timeout_s is None else workers_timeout_s
        self.client: Any = None
        self.cluster: Any = None
        self._no_workers_since: float | None = None
        self._log_level: int | None = None

    def __enter__(self) -> DaskRunner:
        try:
            import dask
            import distributed
        except ImportError:
            raise ClusterError("--cluster needs Dask: pip install 'collsynth[dask]'") from None
        self._log_level = logging.getLogger("distributed").level
        logging.getLogger("distributed").setLevel(logging.CRITICAL)  # our one-line errors say what went wrong
        try:
            with dask.config.set({"distributed.scheduler.allowed-failures": MAX_WORKER_DEATHS - 1,
                                  "distributed.admin.tick.limit": "1h"}):
                self._connect(distributed)
            self._check_workers()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _connect(self, distributed: Any) -> None:
        if self.spec.address is None:
            self.cluster = distributed.LocalCluster(
                n_workers=self.spec.workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                dashboard_address=None, silence_logs=logging.ERROR)
            self.client = distributed.Client(self.cluster, set_as_default=False)
            return
        try:
            self.client = distributed.Client(self.spec.address, timeout=self.connect_timeout_s, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {self.spec.address} ({_one_line(exc)}); start "
                               f"one with `dask scheduler` and workers with `dask worker {self.spec.address}`, or "
                               "check the address") from None

    def _check_workers(self) -> None:
        try:
            self.client.wait_for_workers(1, timeout=self.workers_timeout_s)
        except (TimeoutError, OSError):
            raise ClusterError(f"the Dask scheduler at {self.spec} has no workers after {self.workers_timeout_s:g} s; "
                               f"start some with `dask worker {self.spec}`") from None
        ours = collsynth.__version__
        try:  # imports this module's worker half there, by name (a function of ours could not even be sent)
            versions = self.client.run(pkgutil.resolve_name, "collsynth.catalog.dask_item:COLLSYNTH_VERSION",
                                       on_error="return")
        except (OSError, TimeoutError) as exc:
            raise ClusterError(f"lost the Dask scheduler at {self.spec} while checking its workers "
                               f"({_one_line(exc)})") from None
        for worker, version in sorted(versions.items()):
            if isinstance(version, BaseException):
                raise ClusterError(f"Dask worker {worker} cannot import collsynth ({_one_line(version)}); install "
                                   "it there (pip install 'collsynth[dask]') in the environment `dask worker` runs in")
            if version != ours:
                raise ClusterError(f"Dask worker {worker} has collsynth {version}, this builder {ours}; install the "
                                   "same version on every worker (entries must not depend on where they ran)")

    def __exit__(self, *exc: object) -> None:
        for closable in (self.client, self.cluster):
            if closable is not None:
                with contextlib.suppress(OSError, TimeoutError, RuntimeError):  # a lost scheduler: already gone
                    closable.close()
        self.client = self.cluster = None
        if self._log_level is not None:
            logging.getLogger("distributed").setLevel(self._log_level)
            self._log_level = None

    def threads(self) -> int:
        """Worker threads the scheduler knows now (at least 1)."""
        info = self.client.scheduler_info()
        return max(1, sum(int(worker.get("nthreads", 1)) for worker in info.get("workers", {}).values()))

    def __call__(self, pending: Sequence[WorkItem], claim: Callable[[WorkItem], bool],
                 record: Callable[[WorkItem, ItemResult], None], timeout_s: float) -> None:
        """Run the items of `pending` this builder can claim; record each result as it arrives."""
        queue = list(reversed(pending))
        running: dict[str, tuple[Any, WorkItem]] = {}
        finished: SimpleQueue[str] = SimpleQueue()  # keys of futures that are done, from Dask's callbacks
        try:
            while queue or running:
                window = 2 * self.threads()
                while queue and len(running) < window:
                    item = queue.pop()
                    if claim(item):
                        future = self._submit(item, timeout_s)
                        running[future.key] = (future, item)
                        future.add_done_callback(lambda done: finished.put(done.key))
                if not running:
                    continue
                try:
                    key = finished.get(timeout=POLL_S)
                except Empty:
                    self._check_connection()
                    continue
                future, item = running.pop(key)
                record(item, self._result(future, item))
        except (OSError, TimeoutError) as exc:
            raise self._lost(exc) from None
        except BaseException:
            self._cancel([future for future, _ in running.values()])
            raise

    def _submit(self, item: WorkItem, timeout_s: float) -> Any:
        from collsynth.catalog.dask_item import run_item_isolated

        try:
            return self.client.submit(run_item_isolated, item, timeout_s, pure=False,
                                      key=f"collsynth-item-{item.key[:16]}-{uuid.uuid4().hex[:8]}")
        except (OSError, TimeoutError, RuntimeError) as exc:
            raise self._lost(exc) from None

    def _result(self, future: Any, item: WorkItem) -> ItemResult:
        from distributed import KilledWorker

        try:
            return future.result()  # type: ignore[no-any-return]
        except KilledWorker:
            return ItemResult(item.key, False, f"{MAX_WORKER_DEATHS} Dask workers died while running it (out of "
                                               "memory? killed?); run it again with --retry-failed")
        except Exception as exc:
            if future.status == "cancelled" or self.client.status != "running":
                raise self._lost(None) from None
            return ItemResult(item.key, False, f"Dask worker failed: {type(exc).__name__}: {_one_line(exc)}")

    def _check_connection(self) -> None:
        """Raise ClusterError when the scheduler is gone or has had no worker for `workers_timeout_s`."""
        if self.client.status != "running":
            raise self._lost(None)
        if self.client.scheduler_info().get("workers"):
            self._no_workers_since = None
            return
        now = time.monotonic()
        if self._no_workers_since is None:
            self._no_workers_since = now
        elif now - self._no_workers_since > self.workers_timeout_s:
            raise ClusterError(f"the Dask scheduler at {self.spec} has had no workers for {self.workers_timeout_s:g} "
                               "s; the finished items are recorded: start workers and run the same command again")

    def _lost(self, exc: BaseException | None) -> ClusterError:
        why = f" ({_one_line(exc)})" if exc is not None and str(exc) else ""
        return ClusterError(f"lost the connection to the Dask scheduler at {self.spec}{why}; the finished items are "
                            "recorded: run the same command again to resume")

    def _cancel(self, futures: list[Any]) -> None:
        if futures and self.client is not None and self.client.status == "running":
            with contextlib.suppress(OSError, TimeoutError, RuntimeError):
                self.client.cancel(futures)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:300]

