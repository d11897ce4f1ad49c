"""Building a catalog: entries, content-addressed XML, resume, new sizes, failures, claims, Ctrl-C,
parallel workers and several builders on one database."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from catalog_helpers import LIBRARY_PLAN, assert_no_processes_left, broken_allgather, direct_allgather, write_plan

from collsynth.catalog import Catalog, build_catalog, expand_plan, xml_relpath
from collsynth.catalog import pipeline as pipeline_module
from collsynth.catalog.sources import Synthesized
from collsynth.emit.msccl_xml import read_xml

SYNTH_PLAN = LIBRARY_PLAN.replace('collectives = ["allgather", "allreduce"]', 'collectives = ["allgather"]') + """
[[synthesizers]]
name = "handmade"
kind = "instance"
chunks = 1
steps = 1
"""


def entries_by_name(db_path: Path) -> dict[str, object]:
    with Catalog(db_path) as catalog:
        return {entry.name: entry for entry in catalog.entries()}


def test_library_build_records_verified_entries_with_xml(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(plan, db_path)
    items = expand_plan(plan)
    assert summary.ran == len(items) and summary.skipped == 0 and summary.failed_items == 0
    with Catalog(db_path) as catalog:
        entries = catalog.entries()
        assert {e.collective for e in entries} == {"allgather", "allreduce"}
        assert "ring_allreduce" in {e.name for e in entries}
        for entry in entries:
            assert entry.ok, entry.message
            path = tmp_path / xml_relpath(entry.xml_sha256)
            text = path.read_text()
            assert hashlib.sha256(text.encode()).hexdigest() == entry.xml_sha256
            ir = read_xml(path)
            assert ir.ngpus == 4 and ir.min_bytes == 0 and ir.max_bytes == 0
            times = catalog.times(entry.id)
            assert [p.requested_bytes for p in times] == list(plan.sizes)
            assert all(p.time_us > 0 and p.dtype == "float" for p in times)
            # bigger messages never take less time
            assert all(a.time_us <= b.time_us for a, b in zip(times, times[1:], strict=False))
            assert entry.provenance["synthesizer"] == "hand-written"
            assert entry.ir_stats["nchunksperloop"] >= 1
    # nothing is left half-written next to the XML files
    assert not list(tmp_path.glob("xml/*/*.tmp"))


def test_rerun_skips_finished_work_and_simulates_new_sizes(tmp_path: Path) -> None:
    db_path = tmp_path / "c.sqlite"
    build_catalog(write_plan(tmp_path), db_path)
    again = build_catalog(write_plan(tmp_path), db_path)
    assert again.ran == 0 and again.skipped == again.items and again.resimulated == 0
    bigger = write_plan(tmp_path, LIBRARY_PLAN.replace("1KB:1MB", "1KB:16MB"), "bigger.toml")
    grown = build_catalog(bigger, db_path)
    assert grown.ran == 0 and grown.resimulated == len(entries_by_name(db_path))
    with Catalog(db_path) as catalog:
        for entry in catalog.entries():
            assert [p.requested_bytes for p in catalog.times(entry.id)] == list(bigger.sizes)


def test_synthesized_entry_and_failed_entry_without_xml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    algorithms = (direct_allgather(), broken_allgather())
    monkeypatch.setattr(pipeline_module, "synthesize",
                        lambda item: Synthesized(algorithms, {"solver": "none"}))
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(write_plan(tmp_path, SYNTH_PLAN), db_path)
    assert summary.entries_failed == 1
    entries = entries_by_name(db_path)
    good, bad = entries["smt-c1s1r1"], entries["smt-c1s1r1-2"]
    assert good.ok and (good.chunks, good.steps, good.rounds) == (1, 1, 1)
    assert good.provenance["algorithm"] == "direct"
    assert not bad.ok and bad.xml_sha256 is None and bad.stage == "lower"
    assert "never receives chunk 0" in bad.message
    with Catalog(db_path) as catalog:
        assert catalog.times(bad.id) == []
        stored = {p.name for p in (tmp_path / "xml").rglob("*.xml")}
        # the entries' XML, and what their tuning refers to (tuned configurations' XML, the schedule)
        referenced = {e.xml_sha256 for e in catalog.entries(status="ok")}
        for e in catalog.entries(status="ok"):
            referenced |= {r["xml_sha256"] for r in e.provenance["tuned"]}
            if e.source != "library":  # a schedule is kept to tune new sizes; a library program is rebuilt
                referenced.add(e.provenance["tuned_algorithm_sha256"])
        assert stored == {f"{digest}.xml" for digest in referenced}
    # A rerun leaves the deterministic failure alone; --retry-failed runs it again.
    assert build_catalog(write_plan(tmp_path, SYNTH_PLAN), db_path).ran == 0
    assert build_catalog(write_plan(tmp_path, SYNTH_PLAN), db_path, retry_failed=True).ran == 1


def test_synthesis_failure_is_recorded_as_failed_item(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from collsynth.catalog.errors import CatalogError

    def fail(item):
        raise CatalogError("SMT instance C=1 S=1: unsat")

    monkeypatch.setattr(pipeline_module, "synthesize", fail)
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(write_plan(tmp_path, SYNTH_PLAN), db_path)
    assert summary.failed_items == 1
    with Catalog(db_path) as catalog:
        failed = [item for item in catalog.items() if item.status == "failed"]
        assert len(failed) == 1 and "unsat" in failed[0].message


def test_internal_errors_in_later_stages_become_failed_entries(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import collsynth.compiler as compiler

    def explode(program, **options):
        raise IndexError("boom")

    monkeypatch.setattr(compiler, "compile_program", explode)
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(write_plan(tmp_path), db_path)
    assert summary.entries_ok == 0 and summary.entries_failed > 0
    for entry in entries_by_name(db_path).values():
        assert entry.stage == "compile" and "IndexError: boom" in entry.message


def test_items_claimed_by_another_builder_are_left_to_it(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    first = expand_plan(plan)[0]
    with Catalog(db_path, create=True) as catalog:
        assert catalog.claim(first.key, "other-builder", stale_after_s=60)
    summary = build_catalog(plan, db_path, wait_for_others=False)
    assert summary.claimed_elsewhere == 1 and summary.ran == summary.items - 1
    with Catalog(db_path) as catalog:
        assert first.key not in catalog.finished_keys()
        assert [claim[1] for claim in catalog.claims()] == ["other-builder"]
    # A claim older than the stale limit is taken over.
    taken = build_catalog(plan, db_path, stale_after_s=0.0)
    assert taken.ran == 1
    with Catalog(db_path) as catalog:
        assert catalog.claims() == []


def test_ctrl_c_keeps_finished_items_and_releases_claims(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"

    def interrupt_after_first(event) -> None:
        if event.kind == "done":
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_catalog(plan, db_path, on_event=interrupt_after_first)
    with Catalog(db_path) as catalog:
        assert len(catalog.finished_keys()) == 1
        assert catalog.claims() == []
    rest = build_catalog(plan, db_path)
    assert rest.skipped == 1 and rest.ran == rest.items - 1


def test_parallel_build_matches_serial_build(tmp_path: Path) -> None:
    plan = write_plan(tmp_path)
    serial_dir, parallel_dir = tmp_path / "serial", tmp_path / "parallel"
    serial_dir.mkdir()
    parallel_dir.mkdir()
    build_catalog(plan, serial_dir / "c.sqlite", jobs=1)
    summary = build_catalog(plan, parallel_dir / "c.sqlite", jobs=2)
    assert summary.ran == summary.items
    serial, parallel = entries_by_name(serial_dir / "c.sqlite"), entries_by_name(parallel_dir / "c.sqlite")
    assert {(e.id, e.xml_sha256) for e in serial.values()} == {(e.id, e.xml_sha256) for e in parallel.values()}


def test_two_builders_share_one_database(tmp_path: Path) -> None:
    text = LIBRARY_PLAN.replace('topology = "fully_connected:4"', 'topology = "fully_connected:8"') + """
[[targets]]
topology = "ring:8"
collectives = ["allgather", "allreduce"]
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather", "allreduce", "alltoall"]
"""
    plan = write_plan(tmp_path, text)
    db_path = tmp_path / "c.sqlite"
    # `collsynth catalog build`, run through this Python so the venv in use is the one tested
    code = ("import sys; from collsynth.cli import main; "
            "sys.exit(main(['catalog', 'build', sys.argv[1], '--db', sys.argv[2]], standalone_mode=True))")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(plan.path), str(db_path)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [proc.communicate(timeout=120) for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    items = expand_plan(plan)
    with Catalog(db_path) as catalog:
        assert catalog.finished_keys() == {item.key for item in items}
        assert catalog.claims() == []
        assert all(entry.ok for entry in catalog.entries())
    # every item was recorded exactly once (ids are deterministic and primary keys)
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT COUNT(*) FROM items").fetchone()[0] == len(items)


def test_catalog_refuses_a_foreign_file(tmp_path: Path) -> None:
    from collsynth.catalog import CatalogError

    bogus = tmp_path / "bogus.sqlite"
    bogus.write_text("this is not a database, just text " * 100)
    with pytest.raises(CatalogError, match="not a usable catalog"):
        Catalog(bogus)
    with pytest.raises(CatalogError, match="no catalog at"):
        Catalog(tmp_path / "absent.sqlite")


def test_ctrl_c_in_a_parallel_build_stops_workers(tmp_path: Path) -> None:
    import multiprocessing

    plan = write_plan(tmp_path)
    db_path = tmp_path / "c.sqlite"
    seen = []

    def interrupt_after_first(event) -> None:
        if event.kind == "done":
            seen.append(event.item.key)
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_catalog(plan, db_path, jobs=2, on_event=interrupt_after_first)
    assert multiprocessing.active_children() == []  # the workers were ended
    with Catalog(db_path) as catalog:
        assert seen[0] in catalog.finished_keys()
        assert catalog.claims() == []
    assert build_catalog(plan, db_path, jobs=2).ran == len(expand_plan(plan)) - len(seen)


def test_milp_synthesizer_entry(tmp_path: Path) -> None:
    # one node, no sketch restriction: HiGHS proves this one optimal in seconds, so the budget (far above any
    # plausible load) never decides the result
    import json

    sketch = tmp_path / "one-node.json"
    sketch.write_text(json.dumps({"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [],
                                  "hyperparameters": {"input_chunkup": 1}}))
    text = f"""
sizes = "64KB:4MB"
size_factor = 8
[[synthesizers]]
name = "taccl"
kind = "milp"
sketch = "{sketch}"
size = "1MB"
solver = "highs"
time_limit_s = 3600
[[targets]]
topology = "ndv2"
collectives = ["allgather"]
library = false
"""
    db_path = tmp_path / "c.sqlite"
    summary = build_catalog(write_plan(tmp_path, text), db_path)
    assert summary.failed_items == 0 and summary.entries_ok == 1
    (entry,) = entries_by_name(db_path).values()
    assert entry.name.startswith("milp-") and entry.provenance["synthesizer"] == "milp"
    assert entry.provenance["solver"] == "highs" and entry.provenance["time_limited"] is False


# The item time-limit tests run on a fake clock (the build's time.monotonic) so that no result depends on the
# machine's speed or load: every item but the hanging one finishes under a limit no real run reaches, and the
# hanging one never finishes, so only the clock jumping past the limit (when the test says) stops it.
FAKE_LIMIT_S = 100000
SLOW_PLAN = f"""
sizes = "1KB"
[limits]
item_timeout_s = {FAKE_LIMIT_S}
[[synthesizers]]
name = "slow"
kind = "pareto"
max_chunks = 4
[[targets]]
topology = "2xndv2"
collectives = ["allgather"]
library = false
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather"]
synthesizers = []
"""


class FakeClock:
    """The build module's `time`, with `monotonic` = the real one + `offset` (what the test adds)."""

    def __init__(self) -> None:
        import time as real

        self._real = real
        self.offset = 0.0
        self.jump_each_call = 0.0  # once set, every reading is that much later than the one before

    def monotonic(self) -> float:
        self.offset += self.jump_each_call
        return self._real.monotonic() + self.offset

    def __getattr__(self, name: str):
        return getattr(self._real, name)


def block_forever(item):
    """A synthesis that never ends (pure Python, as a hung solver looks to the build)."""
    import threading

    threading.Event().wait()


def init_hanging_worker() -> None:
    """The build's worker initializer, then every synthesis in this worker hangs."""
    from collsynth.catalog import isolate, pipeline

    isolate.init_worker()
    pipeline.synthesize = block_forever


def test_item_timeout_in_a_serial_build(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    import time as time_module

    from collsynth.catalog import build as build_module

    clock = FakeClock()
    monkeypatch.setattr(build_module, "time", clock)
    hung = []

    def forever(item):
        hung.append(signal.getitimer(signal.ITIMER_REAL)[0])  # the item's timer is running
        try:
            clock.offset = FAKE_LIMIT_S  # the limit has passed (on the build's clock)...
            signal.raise_signal(signal.SIGALRM)  # ...and its timer goes off now
            while True:  # a pure-Python hang: only the item time limit stops it
                time_module.sleep(0.01)
        finally:
            clock.offset = 0.0  # the real time again for the timer that was running before

    monkeypatch.setattr(pipeline_module, "synthesize", forever)
    text = SYNTH_PLAN.replace('size_factor = 4', f'size_factor = 4\n[limits]\nitem_timeout_s = {FAKE_LIMIT_S}')
    db_path = tmp_path / "c.sqlite"
    alarm_handler = signal.getsignal(signal.SIGALRM)
    summary = build_catalog(write_plan(tmp_path, text), db_path)
    assert len(hung) == 1 and hung[0] > 0
    assert summary.failed_items == 1 and summary.entries_ok == 2  # the library items still ran
    with Catalog(db_path) as catalog:
        (failed,) = [item for item in catalog.items() if item.status == "failed"]
        assert f"timed out after {FAKE_LIMIT_S} s" in failed.message
    assert signal.getsignal(signal.SIGALRM) == alarm_handler  # the build put the handler back


def test_item_timeout_in_a_parallel_build_restarts_the_pool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing
    import uuid

    from collsynth.catalog import build as build_module
    from collsynth.synth.parallel import make_pool

    marker = f"COLLSYNTH_TEST_{uuid.uuid4().hex}"
    monkeypatch.setenv(marker, "1")  # inherited by every process the build starts
    clock = FakeClock()
    monkeypatch.setattr(build_module, "time", clock)
    pools = []

    def hanging_pool(jobs: int):
        pools.append(jobs)
        return make_pool(jobs, initializer=init_hanging_worker)

    monkeypatch.setattr(build_module, "new_pool", hanging_pool)
    db_path = tmp_path / "c.sqlite"
    plan = write_plan(tmp_path, SLOW_PLAN)
    others = [item.key for item in expand_plan(plan) if "2xndv2" not in item.label]
    done = []

    def on_event(event) -> None:
        if event.kind == "done" and event.item.key in others:
            done.append(event.item.key)
            if len(done) == len(others):  # only the hanging item is left: its limit passes now
                clock.jump_each_call = FAKE_LIMIT_S

    summary = build_catalog(plan, db_path, jobs=2, on_event=on_event)
    assert sorted(done) == sorted(others) and len(pools) == 2  # the pool was restarted once, at the time-out
    assert summary.ran == len(expand_plan(plan)) and summary.failed_items == 1
    assert summary.entries_ok == 2 and summary.entries_failed == 0
    with Catalog(db_path) as catalog:
        (failed,) = [item for item in catalog.items() if item.status == "failed"]
        assert "2xndv2" in failed.label and f"timed out after {FAKE_LIMIT_S} s" in failed.message
        assert catalog.claims() == []
    assert multiprocessing.active_children() == []
    assert_no_processes_left(marker)  # the hung worker too


def test_a_killed_worker_is_survived(tmp_path: Path) -> None:
    import multiprocessing

    killed = []

    def kill_a_worker(event) -> None:
        if event.kind == "start" and not killed:
            children = multiprocessing.active_children()
            if children:
                children[0].kill()
                killed.append(children[0].pid)

    plan = write_plan(tmp_path)
    summary = build_catalog(plan, tmp_path / "c.sqlite", jobs=2, on_event=kill_a_worker)
    assert killed
    assert summary.failed_items == 0 and summary.entries_ok == len(expand_plan(plan))


def test_a_pool_that_breaks_during_submission_is_restarted(tmp_path: Path, monkeypatch) -> None:
    """A worker dying while items are being submitted makes submit() raise (not return a broken future):
    the build restarts the pool and finishes every item, none counted as failed."""
    from collsynth.catalog import build as build_module

    real_new_pool = build_module.new_pool
    failures = []

    def flaky_pool(jobs: int):
        pool = real_new_pool(jobs)
        real_submit = pool.submit

        def submit(*args, **kwargs):
            if len(failures) < 2:  # the first two submissions find the pool closing
                failures.append(1)
                raise OSError("handle is closed")
            return real_submit(*args, **kwargs)

        pool.submit = submit
        return pool

    monkeypatch.setattr(build_module, "new_pool", flaky_pool)
    plan = write_plan(tmp_path)
    summary = build_catalog(plan, tmp_path / "c.sqlite", jobs=2)
    assert len(failures) == 2
    assert summary.failed_items == 0 and summary.entries_ok == len(expand_plan(plan))


def test_a_pool_that_never_starts_gives_one_line(tmp_path: Path, monkeypatch) -> None:
    from collsynth.catalog import build as build_module
    from collsynth.core.errors import CollsynthError

    real_new_pool = build_module.new_pool

    def dead_pool(jobs: int):
        pool = real_new_pool(jobs)

        def submit(*args, **kwargs):
            raise OSError("handle is closed")

        pool.submit = submit
        return pool

    monkeypatch.setattr(build_module, "new_pool", dead_pool)
    with pytest.raises(CollsynthError, match="worker pool fails to start; retry with --jobs 1"):
        build_catalog(write_plan(tmp_path), tmp_path / "c.sqlite", jobs=2)


def test_item_alarm_keeps_an_outer_timer() -> None:
    """The per-item SIGALRM timer must not swallow a timer someone else set (e.g. pytest-timeout)."""
    import signal
    import time as time_module

    from collsynth.catalog.build import ItemTimeout, _alarm

    class Outer(Exception):
        pass

    def outer(signum, frame):
        raise Outer

    previous = signal.signal(signal.SIGALRM, outer)
    try:
        signal.setitimer(signal.ITIMER_REAL, 120.0)
        with pytest.raises(ItemTimeout), _alarm(0.05):
            time_module.sleep(60.0)
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 60.0 < left <= 120.0  # the outer deadline is back in place (not cut short, not pushed back)
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        with pytest.raises(Outer), _alarm(600.0):
            time_module.sleep(60.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
