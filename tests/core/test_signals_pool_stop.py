"""`stop_pool` leaves nothing that the interpreter's exit waits for, even when a worker died halfway through
sending its result.

A worker sends a result over 16 KiB as two writes, a length header and then the body. Killed between the two (by
`stop_pool` after a Ctrl-C, or by the kernel out of memory), it leaves a header in the result pipe with no body.
The pool's manager thread, woken by the header, then reads the body forever: the parent keeps the pipe's write end
open, so no end of file comes. The command itself goes on (stop_pool does not wait for that thread), but at exit
Python joins every pool's manager thread (concurrent.futures.process._python_exit) and hangs there: the one exit
hang seen in the signal loop (tests/cli/repeat_signals.sh), after every test had passed."""

from __future__ import annotations

import subprocess
import sys

import pytest

# The worker's task writes the header of a 1 MiB message to the result pipe and dies before the body: a worker
# killed between the two writes of `Connection.send_bytes`, without waiting for a signal to land there.
_SCRIPT = """
import os, struct, sys, time
from collsynth.core.signals import SafeStartPool, stop_pool

def die_after_the_header():
    frame = sys._getframe(1)
    while "result_queue" not in frame.f_locals:  # concurrent.futures.process._process_worker's
        frame = frame.f_back
    writer = frame.f_locals["result_queue"]._writer
    writer._send(struct.pack("!i", 1 << 20))
    os._exit(1)

if __name__ == "__main__":
    pool = SafeStartPool(1)
    future = pool.submit(die_after_the_header)
    [worker] = pool._processes.values()
    worker.join()
    manager = pool._executor_manager_thread
    deadline = time.monotonic() + 60
    while not manager._started.is_set() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)  # the manager thread now reads the body that never comes (before the fix)
    stop_pool(pool)
    print("stopped", flush=True)
"""


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")
def test_a_worker_killed_while_sending_its_result_leaves_no_exit_hang(tmp_path) -> None:
    script = tmp_path / "half_sent.py"
    script.write_text(_SCRIPT)
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             cwd=tmp_path)
    try:
        out, err = child.communicate(timeout=120)  # the exit takes well under a second once nothing blocks it
    except subprocess.TimeoutExpired:
        child.kill()
        out, err = child.communicate()
        pytest.fail(f"the process did not exit after stop_pool (printed {out.strip()!r}); stderr: {err[-2000:]}")
    assert out.strip() == "stopped" and child.returncode == 0, err
