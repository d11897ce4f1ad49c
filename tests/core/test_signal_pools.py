"""collsynth.core.signals: signals held while a pool starts a worker, workers that a Ctrl-C cannot catch
half-started, and a teardown that leaves no worker behind. The dangerous moments are fixed by hooks (a signal
raised right after the worker process exists; a worker held inside its start-up imports), not by timing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from collsynth.core.signals import Terminated, interrupts_held, terminate_as_interrupt

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="Linux signals and /proc"),
              pytest.mark.usefixtures("ctrl_c_raises")]


def test_a_signal_in_the_block_waits_for_its_end() -> None:
    reached_end = False
    with pytest.raises(KeyboardInterrupt), interrupts_held():
        signal.raise_signal(signal.SIGINT)
        time.sleep(0.01)  # a handler would have run by now
        reached_end = True
    assert reached_end


def test_a_held_sigterm_goes_to_the_handler_in_place_after_the_block() -> None:
    with terminate_as_interrupt():
        with pytest.raises(Terminated), interrupts_held():
            signal.raise_signal(signal.SIGTERM)
            assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == set()  # nothing left blocked


def test_a_quiet_block_changes_nothing() -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with interrupts_held():
        pass
    assert {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)} == before


# The parent: a SafeStartPool runs two trivial tasks; a KeyboardInterrupt (Ctrl-C or SIGTERM) is handled as the
# builder does (stop_pool, one line, exit 130). PIDFILE receives the worker pids.
PARENT = """
    import os, signal, sys, time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a background runner may start us with it ignored
    sys.path.insert(0, {helpers!r})
    os.environ["SLOW_START_PARENT"] = str(os.getpid())
    {before}
    from collsynth.core.signals import SafeStartPool, stop_pool, terminate_as_interrupt
    from slow_start import init
    with terminate_as_interrupt():
        pool = SafeStartPool(2, initializer=init)
        try:
            futures = [pool.submit(pow, 2, 5), pool.submit(pow, 3, 2)]
            open({pidfile!r}, "w").write(" ".join(map(str, pool._processes)))
            print("answers", [f.result() for f in futures], flush=True)
        except KeyboardInterrupt:
            time.sleep(0.5)  # keeping finished work first, as a builder does
            stop_pool(pool)
            print("interrupted", file=sys.stderr)
            sys.exit(130)
    stop_pool(pool)
    """

# Imported by each worker while it unpickles its start-up data: in a worker it says so and waits there.
SLOW_START = """
    import os, time
    if os.getpid() != int(os.environ["SLOW_START_PARENT"]):
        open(os.path.join({helpers!r}, "worker-%d" % os.getpid()), "w").close()
        time.sleep(float(os.environ.get("SLOW_START_S", "0")))
    def init():
        pass
    """

# The signal lands right after a worker process exists and before its parent has written its start-up data.
SIGNAL_INSIDE_SPAWN = """
    import multiprocessing.util, signal
    _spawn = multiprocessing.util.spawnv_passfds
    def _spawn_then_signal(path, args, passfds):
        pid = _spawn(path, args, passfds)
        if "--multiprocessing-fork" in args:  # a worker (not the resource tracker)
            signal.raise_signal(signal.SIGTERM)
        return pid
    multiprocessing.util.spawnv_passfds = _spawn_then_signal
    """


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


def _run_parent(tmp_path: Path, before: str = "", slow_start_s: float = 0.0) -> subprocess.Popen[str]:
    (tmp_path / "slow_start.py").write_text(textwrap.dedent(SLOW_START.format(helpers=str(tmp_path))))
    code = textwrap.dedent(PARENT).format(helpers=str(tmp_path), pidfile=str(tmp_path / "pids"),
                                          before=textwrap.dedent(before).strip())
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True, env={**os.environ, "SLOW_START_S": str(slow_start_s)})


def _assert_clean_end(parent: subprocess.Popen[str], tmp_path: Path) -> str:
    _, stderr = parent.communicate(timeout=120)
    assert parent.returncode == 130, stderr
    assert "Traceback" not in stderr and "Error" not in stderr and "leaked" not in stderr, stderr
    assert stderr.strip().splitlines() == ["interrupted"], stderr
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()] if (tmp_path / "pids").exists() else []
    pids += [int(p.name.split("-")[1]) for p in tmp_path.glob("worker-*")]
    assert not [pid for pid in pids if _alive(pid)], "a worker outlived its pool"
    return stderr


def test_a_signal_while_a_worker_is_being_spawned_leaves_no_traceback(tmp_path: Path) -> None:
    # A plain pool: the KeyboardInterrupt leaves the spawn with the start-up data unwritten, the worker's
    # pickle.load ends in EOFError and prints its traceback on the shared stderr.
    parent = _run_parent(tmp_path, before=SIGNAL_INSIDE_SPAWN)
    _assert_clean_end(parent, tmp_path)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT-to-group", "SIGTERM-to-parent"])
def test_a_signal_while_workers_are_starting_leaves_no_traceback_and_no_worker(tmp_path: Path, signum: int) -> None:
    # Ctrl-C reaches the workers inside their start-up imports (a plain pool's workers print a KeyboardInterrupt
    # traceback); a SIGTERM to the parent alone tears the pool down under workers still starting.
    parent = _run_parent(tmp_path, slow_start_s=60)
    try:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("worker-*")) and parent.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert parent.poll() is None and list(tmp_path.glob("worker-*")), parent.communicate()
        if signum == signal.SIGINT:
            os.killpg(parent.pid, signal.SIGINT)
        else:
            os.kill(parent.pid, signal.SIGTERM)
        _assert_clean_end(parent, tmp_path)
    finally:
        if parent.poll() is None:
            os.killpg(parent.pid, signal.SIGKILL)
            parent.communicate()


def test_a_pool_that_is_not_interrupted_runs_its_work(tmp_path: Path) -> None:
    parent = _run_parent(tmp_path)
    out, err = parent.communicate(timeout=120)
    assert parent.returncode == 0 and "answers [32, 9]" in out, err


@pytest.mark.parametrize("start_error", [ValueError("bad value(s) in fds_to_keep"), OSError("handle is closed")])
def test_a_worker_that_cannot_be_started_breaks_the_pool(monkeypatch, start_error: Exception) -> None:
    """A worker dies; the manager thread closes the pool's pipes while `submit` spawns a replacement, and the
    spawn fails on a closed descriptor (seen in CI as ValueError from fork_exec). Callers restart broken pools,
    so the failure must reach them as BrokenProcessPool, not as a ValueError that ends the command."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    from collsynth.core.signals import SafeStartPool

    def failing_spawn(self) -> None:
        raise start_error

    monkeypatch.setattr(ProcessPoolExecutor, "_adjust_process_count", failing_spawn)
    pool = SafeStartPool(1)
    try:
        with pytest.raises(BrokenProcessPool, match="could not be started"):
            pool.submit(abs, -1)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
