"""One work item on a Dask worker: run in a fresh process of its own, under the item's time limit.

Dask runs tasks in threads of a long-lived worker process, where neither a signal-based time limit nor a
fresh solver context is possible. So the task (`run_item_isolated`) starts `python -m
collsynth.catalog.dask_item ITEM RESULT PARENT_PID` in a new session, waits for it at most the item's time
limit, and kills the whole session when the limit passes. The child runs `pipeline.run_item` exactly as a
local build does (so local and Dask builds give the same entries) and dies with its worker (Linux
parent-death signal), so a worker killed with SIGKILL leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import collsynth
from collsynth.catalog.plan import WorkItem
from collsynth.catalog.results import ItemResult

COLLSYNTH_VERSION = collsynth.__version__  # what the coordinator asks a worker for before it sends items
_STDERR_TAIL = 600  # characters of a crashed item process's stderr kept in the failure message


def run_item_isolated(item: WorkItem, timeout_s: float) -> ItemResult:
    """`pipeline.run_item(item)` in a fresh process, ended after `timeout_s` (the Dask task's body)."""
    from collsynth.catalog.build import timed_out

    with tempfile.TemporaryDirectory(prefix="collsynth-item-") as scratch:
        item_path, result_path = Path(scratch) / "item.pickle", Path(scratch) / "result.pickle"
        item_path.write_bytes(pickle.dumps(item))
        command = [sys.executable, "-m", "collsynth.catalog.dask_item", str(item_path), str(result_path),
                   str(os.getpid())]
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, start_new_session=True)
        try:
            _, stderr = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_session(process)
            return timed_out(item, timeout_s)
        except BaseException:
            _kill_session(process)
            raise
        if process.returncode != 0 or not result_path.is_file():
            tail = stderr.decode("utf-8", "replace").strip()[-_STDERR_TAIL:].replace("\n", " | ")
            return ItemResult(item.key, False, f"its process on the Dask worker exited with code "
                                               f"{process.returncode}: {tail or 'no message'}")
        result = pickle.loads(result_path.read_bytes())
    if not isinstance(result, ItemResult):
        return ItemResult(item.key, False, f"its process returned {type(result).__name__}, not an ItemResult")
    return result


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the item process and everything it started (its own session)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=30)


def _die_with(parent_pid: int) -> None:
    """Get SIGKILL when the worker that started this process dies (and exit if it is already gone)."""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        pass  # not Linux: the worker's timeout still ends the process
    if os.getppid() != parent_pid:
        os._exit(1)


def main(argv: list[str]) -> int:
    item_path, result_path, parent_pid = argv
    _die_with(int(parent_pid))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when this process ends
    from collsynth.catalog.pipeline import run_item
    from collsynth.core.files import write_atomic

    item = pickle.loads(Path(item_path).read_bytes())
    result = run_item(item)
    write_atomic(result_path, pickle.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
