"""Several builders and interrupted builders (issue 16): claims of a dead builder are taken over at once, a
live builder's heartbeat keeps its claims, a build waits for what others hold (or, with --no-wait, says so and
exits 1); SIGINT and SIGTERM keep finished entries with no traceback, orphan process or leaked semaphore."""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from catalog_helpers import assert_no_processes_left, write_plan
from click.testing import CliRunner

from collsynth.catalog import Catalog, build_catalog, expand_plan
from collsynth.cli import main


def wait_until(condition, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.05)


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_claims_of_a_dead_builder_are_taken_over_at_once(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    first, second = expand_plan(plan)[:2]
    with Catalog(db_path, create=True) as catalog:  # fresh claims: a dead builder here, a silent one elsewhere
        assert catalog.claim(first.key, f"{socket.gethostname()}:{dead_pid()}:dead", stale_after_s=60)
        assert catalog.claim(second.key, "other-host:1:silent", stale_after_s=60)
        conn = sqlite3.connect(db_path)
        conn.execute("UPDATE claims SET claimed_at = claimed_at - 120 WHERE key = ?", (second.key,))
        conn.commit()
        conn.close()
    summary = build_catalog(plan, db_path, stale_after_s=60, wait_for_others=False)
    assert summary.claimed_elsewhere == 0 and summary.ran == summary.items
    with Catalog(db_path) as catalog:
        assert catalog.claims() == [] and len(catalog.finished_keys()) == summary.items


def test_a_build_waits_for_a_live_builder_and_takes_over_when_it_dies(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    first = expand_plan(plan)[0]
    other = subprocess.Popen(["sleep", "60"])  # a live builder on this host, as far as the claim says
    try:
        with Catalog(db_path, create=True) as catalog:
            assert catalog.claim(first.key, f"{socket.gethostname()}:{other.pid}:other", stale_after_s=60)
        seen = []

        def on_event(event) -> None:  # type: ignore[no-untyped-def]
            seen.append(event.kind)
            if event.kind == "claimed":  # the other builder dies while this one waits for its item
                other.kill()
                other.wait()

        summary = build_catalog(plan, db_path, stale_after_s=60, on_event=on_event)
    finally:
        other.kill()
        other.wait()
    assert "claimed" in seen and summary.claimed_elsewhere == 0 and summary.ran == summary.items
    with Catalog(db_path) as catalog:
        assert catalog.claims() == [] and first.key in catalog.finished_keys()


def test_items_left_to_a_live_builder_exit_1_with_no_wait(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    with Catalog(db_path, create=True) as catalog:  # this very process: alive for the whole test
        assert catalog.claim(expand_plan(plan)[0].key, f"{socket.gethostname()}:{os.getpid()}:x", stale_after_s=60)
    result = CliRunner().invoke(main, ["catalog", "build", str(plan.path), "--db", str(db_path), "--no-wait"])
    assert result.exit_code == 1, result.output
    assert "1 items are left to other builders" in result.output and "Traceback" not in result.output


def test_a_running_build_keeps_its_claims_fresh(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    beats = []

    def on_event(event) -> None:  # type: ignore[no-untyped-def]
        if event.kind == "start" and not beats:
            with Catalog(db_path) as catalog:
                (claimed_at,) = [at for key, _, at in catalog.claims() if key == event.item.key]

                def refreshed() -> bool:
                    return any(key == event.item.key and at > claimed_at for key, _, at in catalog.claims())

                wait_until(refreshed, 10, "a heartbeat")
            beats.append(claimed_at)

    summary = build_catalog(plan, db_path, stale_after_s=0.4, on_event=on_event)
    assert beats and summary.ran == summary.items


SLOW_PLAN = """
sizes = "1KB"
[[synthesizers]]
name = "slow"
kind = "pareto"
max_chunks = 4
time_limit_s = 300
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather", "allreduce", "alltoall"]
synthesizers = []
[[targets]]
topology = "2xndv2"
collectives = ["allgather"]
library = false
"""


def finished_items(db_path: Path) -> int:
    try:
        with sqlite3.connect(db_path) as conn:
            return int(conn.execute("SELECT COUNT(*) FROM items").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="needs /proc to find orphans")
@pytest.mark.parametrize(("signum", "moment"), [  # two in CI, all four with -m slow
    # at start-up: workers still starting (collsynth.core.signals.SafeStartPool; tests/core/test_signal_pools.py)
    pytest.param(signal.SIGTERM, "start", id="SIGTERM-start"),
    pytest.param(signal.SIGINT, "after-first-item", id="SIGINT-after-first-item"),
    pytest.param(signal.SIGINT, "start", id="SIGINT-start", marks=pytest.mark.slow),
    pytest.param(signal.SIGTERM, "after-first-item", id="SIGTERM-after-first-item", marks=pytest.mark.slow)])
def test_signals_keep_finished_work_and_leave_nothing_behind(tmp_path: Path, signum: int, moment: str) -> None:
    plan = write_plan(tmp_path, SLOW_PLAN)
    db_path = tmp_path / "c.sqlite"
    marker = f"COLLSYNTH_TEST_{uuid.uuid4().hex}"
    collsynth = Path(sys.executable).parent / "collsynth"
    # Its own session, so that a build that outlives the test is ended with its workers (a hung build killed alone
    # leaves workers holding its pipes, and busy); faulthandler, so that such a build shows where it was.
    build = subprocess.Popen(
        [str(collsynth), "catalog", "build", str(plan.path), "--db", str(db_path), "--jobs", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, marker: "1", "PYTHONFAULTHANDLER": "1"},
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # a background shell ignores SIGINT
    try:
        if moment == "start":  # the database exists: the worker pool is starting
            wait_until(lambda: db_path.exists() or build.poll() is not None, 60, "the build to start")
        else:
            wait_until(lambda: finished_items(db_path) >= 1 or build.poll() is not None, 120, "a finished item")
        assert build.poll() is None, build.communicate()
        done_before = finished_items(db_path)
        build.send_signal(signum)
        try:
            _, stderr = build.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            build.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            time.sleep(2)
            os.killpg(build.pid, signal.SIGKILL)
            _, stderr = build.communicate()
            raise AssertionError(f"the build was still running 60 s after the signal; its stacks:\n{stderr}") from None
    finally:
        if build.poll() is None:
            os.killpg(build.pid, signal.SIGKILL)
            build.communicate()
    assert build.returncode == 130, stderr
    assert stderr.strip().splitlines()[-1:] == ["interrupted"], stderr
    assert "Traceback" not in stderr and "leaked" not in stderr
    assert_no_processes_left(marker)
    with Catalog(db_path) as catalog:
        assert len(catalog.finished_keys()) >= done_before and catalog.claims() == []
