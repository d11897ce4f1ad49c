"""Catalog builds on Dask (loopback only): a LocalCluster of 2 processes, and a real `dask scheduler` with two
`dask worker` processes, one killed mid-build; bad cluster addresses, unreachable schedulers and workers
without collsynth; a lost scheduler. Every build is compared with a local build of the same plan."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from catalog_helpers import LIBRARY_PLAN, write_plan
from click.testing import CliRunner

from collsynth.catalog import Catalog, build_catalog, expand_plan
from collsynth.catalog import dask_build as dask_build_module
from collsynth.catalog.dask_build import ClusterError, ClusterSpec, parse_cluster
from collsynth.cli import main

distributed = pytest.importorskip("distributed")

# two library items and one real SMT synthesis per collective target: small, but every path of an item
PLAN = """
sizes = "1KB:1MB"
size_factor = 4
[[synthesizers]]
name = "tiny"
kind = "instance"
chunks = 1
steps = 1
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather"]
[[targets]]
topology = "ring:4"
collectives = ["allgather", "allreduce"]
synthesizers = []
"""
BIN = Path(sys.executable).parent


def catalog_contents(db_path: Path) -> list[tuple[object, ...]]:
    """Every entry's id, status, XML hash and predicted times: what must not depend on where it was built."""
    with Catalog(db_path) as catalog:
        return sorted((e.id, e.status, e.xml_sha256, tuple((p.dtype, p.requested_bytes, p.time_us, p.busbw_GBps)
                                                          for p in catalog.times(e.id)))
                      for e in catalog.entries())


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[object, ...]]:
    """The plan built locally (serial, no Dask)."""
    root = tmp_path_factory.mktemp("local")
    summary = build_catalog(write_plan(root, PLAN), root / "c.sqlite")
    assert summary.failed_items == 0 and summary.entries_failed == 0
    return catalog_contents(root / "c.sqlite")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.1)


class LoopbackCluster:
    """A `dask scheduler` and `dask worker` processes on 127.0.0.1, each in its own session; stop() kills all."""

    def __init__(self, log_dir: Path) -> None:
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.log_dir = log_dir
        self.processes: list[subprocess.Popen[bytes]] = []
        self.scheduler = self._start("scheduler", ["scheduler", "--host", "127.0.0.1", "--port",
                                                   self.address.rsplit(":", 1)[1], "--no-dashboard"])

    def _start(self, name: str, args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        log = open(self.log_dir / f"{name}-{len(self.processes)}.log", "wb")  # noqa: SIM115 (closed with the process)
        process = subprocess.Popen([str(BIN / "dask"), *args], stdout=log, stderr=subprocess.STDOUT,
                                   env={**os.environ, **(env or {})}, start_new_session=True)
        log.close()
        self.processes.append(process)
        return process

    def start_worker(self, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        return self._start("worker", ["worker", self.address, "--nthreads", "1", "--no-nanny", "--no-dashboard"], env)

    def workers(self) -> int:
        with distributed.Client(self.address, timeout=30, set_as_default=False) as client:
            return len(client.scheduler_info()["workers"])

    def wait_for_workers(self, count: int) -> None:
        wait_until(lambda: self.workers() == count, 60, f"{count} Dask workers")

    @staticmethod
    def kill(process: subprocess.Popen[bytes]) -> None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)

    def stop(self) -> None:
        for process in self.processes:
            try:
                self.kill(process)
            except ProcessLookupError:
                process.wait(timeout=30)


@pytest.fixture
def loopback(tmp_path: Path) -> Iterator[LoopbackCluster]:
    cluster = LoopbackCluster(tmp_path)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.mark.parametrize("text", ["foo", "tcp://host", "tcp://127.0.0.1:0", "tcp://127.0.0.1:99999", "local:0",
                                  "local:x", "udp://127.0.0.1:8786", "tcp://a b:1", ""])
def test_malformed_cluster_addresses_are_refused(text: str) -> None:
    with pytest.raises(ClusterError, match="cluster"):
        parse_cluster(text)


def test_cluster_addresses() -> None:
    assert parse_cluster("local:2") == ClusterSpec(workers=2)
    assert parse_cluster(" tcp://10.0.0.5:8786 ") == ClusterSpec(address="tcp://10.0.0.5:8786")
    assert parse_cluster("tcp://[::1]:8786").address == "tcp://[::1]:8786"


def run_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output


@pytest.mark.parametrize("existing", [False, True])
def test_bad_cluster_is_one_line_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    existing: bool) -> None:
    plan = write_plan(tmp_path, PLAN)
    db_path = tmp_path / "c.sqlite"
    if existing:  # a catalog that is there already is not changed either
        build_catalog(write_plan(tmp_path, LIBRARY_PLAN, "first.toml"), db_path)
    before = {path.name: path.read_bytes() for path in tmp_path.glob("c.sqlite*")}
    monkeypatch.setattr(dask_build_module, "CONNECT_TIMEOUT_S", 1.0)
    for address, message in (("tcp://nowhere", "is not a cluster address"),
                             (f"tcp://127.0.0.1:{free_port()}", "cannot reach the Dask scheduler")):
        code, output = run_cli("catalog", "build", str(plan.path), "--db", str(db_path), "--cluster", address)
        assert code == 2, output
        assert output.count("\n") == 1 and message in output and "Traceback" not in output
        assert {path.name: path.read_bytes() for path in tmp_path.glob("c.sqlite*")} == before


def test_local_cluster_build_equals_local_build(tmp_path: Path, local_reference: list[tuple[object, ...]]) -> None:
    plan = write_plan(tmp_path, PLAN)
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(plan, db_path, cluster="local:2")
    assert summary.ran == summary.items == len(expand_plan(plan)) and summary.failed_items == 0
    assert catalog_contents(db_path) == local_reference
    with Catalog(db_path) as catalog:
        assert catalog.claims() == []
    again = build_catalog(plan, db_path, cluster="local:2")  # resuming skips finished work
    assert again.ran == 0 and again.skipped == again.items


def test_item_time_limit_holds_on_dask_workers(tmp_path: Path) -> None:
    """A synthesis that would run for days is stopped on the worker at the item's limit (the only item: nothing
    else can run into the limit however loaded the machine is; were it not stopped, the build would not end)."""
    text = """
sizes = "1KB"
[limits]
item_timeout_s = 2
[[synthesizers]]
name = "slow"
kind = "pareto"
max_chunks = 4
time_limit_s = 1000000
[[targets]]
topology = "2xndv2"
collectives = ["allgather"]
library = false
"""
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(write_plan(tmp_path, text), db_path, cluster="local:1")
    assert summary.failed_items == 1
    with Catalog(db_path) as catalog:
        (item,) = catalog.items()
        assert item.status == "failed" and "timed out after 2 s" in item.message


def test_workers_without_collsynth_are_refused(tmp_path: Path, loopback: LoopbackCluster) -> None:
    blocker = tmp_path / "blocker" / "collsynth"
    blocker.mkdir(parents=True)  # shadows the installed package, as a worker in another environment would
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'collsynth'\", "
                                         "name='collsynth')\n")
    loopback.start_worker(env={"PYTHONPATH": str(blocker.parent)})
    loopback.wait_for_workers(1)
    db_path = tmp_path / "c.sqlite"
    code, output = run_cli("catalog", "build", str(write_plan(tmp_path, PLAN).path), "--db", str(db_path),
                           "--cluster", loopback.address)
    assert code == 2 and output.count("\n") == 1, output
    assert "cannot import collsynth" in output and "pip install" in output
    assert not list(tmp_path.glob("c.sqlite*"))


def test_a_worker_killed_mid_build_loses_nothing(tmp_path: Path, loopback: LoopbackCluster,
                                                 local_reference: list[tuple[object, ...]]) -> None:
    victim = loopback.start_worker()
    loopback.start_worker()
    loopback.wait_for_workers(2)
    plan = write_plan(tmp_path, PLAN)
    killed: list[int] = []

    def kill_a_worker(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind == "done" and not killed:  # the other items are in flight on both workers now
            loopback.kill(victim)
            killed.append(victim.pid)

    summary = build_catalog(plan, tmp_path / "c.sqlite", cluster=loopback.address, on_event=kill_a_worker)
    assert killed and summary.failed_items == 0 and summary.ran == summary.items
    assert catalog_contents(tmp_path / "c.sqlite") == local_reference

    # Losing the scheduler stops the next build with one line; what finished stays, a resume completes it.
    db_path = tmp_path / "lost.sqlite"

    def kill_the_scheduler(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind == "done":
            loopback.kill(loopback.scheduler)

    with pytest.raises(ClusterError, match="lost the connection to the Dask scheduler.*run the same command again"):
        build_catalog(plan, db_path, cluster=loopback.address, on_event=kill_the_scheduler)
    with Catalog(db_path) as catalog:
        assert len(catalog.finished_keys()) >= 1 and catalog.claims() == []
    resumed = build_catalog(plan, db_path)
    assert resumed.skipped >= 1 and resumed.ran == resumed.items - resumed.skipped
    assert catalog_contents(db_path) == local_reference
