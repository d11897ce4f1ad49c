"""Running work in fresh, disposable processes.

A synthesis no longer needs its own process for determinism (each run gets a fresh z3 context,
collsynth.synth.portfolio). A fresh process is still how a Dask item's time limit is enforced: a worker thread
cannot be stopped, a process can (collsynth.catalog.dask_item).

`run_in_fresh_process` starts `python -m collsynth.catalog.isolate` (a plain subprocess in a session of its own:
no multiprocessing pool, so no semaphores that a killed worker could leak, and it works inside daemonic
processes such as Dask workers). The child gets SIGKILL when the process that started it dies (Linux
parent-death signal); interrupting the caller (Ctrl-C, an item time limit) kills the child's whole session.
Helpers here also start and stop the builder's worker pools: workers ignore Ctrl-C (the parent decides) and
die with their parent.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from collsynth.synth.parallel import make_pool, stop_pool

__all__ = ["FreshProcessTimeout", "init_worker", "new_pool", "run_in_fresh_process", "stop_pool"]

T = TypeVar("T")
_STDERR_TAIL = 600  # characters of a crashed child's stderr kept in the error message


def init_worker() -> None:
    """Process initializer: ignore SIGINT (the parent handles Ctrl-C) and get SIGTERM when the parent dies."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: workers still end when their task queue closes


def new_pool(workers: int) -> ProcessPoolExecutor:
    return make_pool(workers, initializer=init_worker)


class FreshProcessTimeout(Exception):
    """`run_in_fresh_process` ended its child at the time limit."""


def run_in_fresh_process(fn: Callable[..., T], *args: Any, timeout_s: float | None = None) -> T:
    """`fn(*args)` (fn importable by name, args picklable) in a new Python process; its exception is re-raised
    here. Past `timeout_s` the process is killed and FreshProcessTimeout raised."""
    with tempfile.TemporaryDirectory(prefix="collsynth-fresh-") as scratch:
        call_path, answer_path = Path(scratch) / "call.pickle", Path(scratch) / "answer.pickle"
        call_path.write_bytes(pickle.dumps((fn, args)))
        command = [sys.executable, "-m", "collsynth.catalog.isolate", str(call_path), str(answer_path),
                   str(os.getpid())]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_session(process)
            raise FreshProcessTimeout(f"stopped after {timeout_s:g} s") from None
        except BaseException:
            _kill_session(process)
            raise
        if not answer_path.is_file():
            tail = stderr.decode("utf-8", "replace").strip()[-_STDERR_TAIL:].replace("\n", " | ")
            raise RuntimeError(f"its process exited with code {process.returncode}: {tail or 'no message'}")
        ok, value = pickle.loads(answer_path.read_bytes())
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the child and everything it started (its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _die_with(parent_pid: int) -> None:
    """Get SIGKILL when the process that started this one dies (and exit if it is already gone)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the caller's time limit and interrupt handling still end this process
    if os.getppid() != parent_pid:
        os._exit(1)


def _child_main(argv: list[str]) -> int:
    call_path, answer_path, parent_pid = argv
    _die_with(int(parent_pid))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when this process ends
    from collsynth.core.files import write_atomic

    fn, args = pickle.loads(Path(call_path).read_bytes())
    try:
        answer: tuple[bool, Any] = (True, fn(*args))
    except Exception as exc:
        answer = (False, exc)
    try:
        data = pickle.dumps(answer)
    except Exception as exc:  # an exception or result that cannot be pickled: report it by name
        data = pickle.dumps((False, RuntimeError(f"{type(exc).__name__}: {exc}")))
    write_atomic(answer_path, data)
    return 0


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
