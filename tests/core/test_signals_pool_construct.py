"""A signal while a SafeStartPool is being made leaks no semaphore: it is acted on once the pool is made."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A SIGINT right after the pool's first semaphore is registered with the resource tracker (the moment where, acted
# on at once, it left that semaphore without the finalizer that unlinks it).
_SCRIPT = """
import os, signal
from multiprocessing import resource_tracker

# a terminal's Ctrl-C handling, also where the runner started the tests with SIGINT ignored (no job control)
signal.signal(signal.SIGINT, signal.default_int_handler)

real_register = resource_tracker.register
sent = []

def register(name, rtype):
    real_register(name, rtype)
    if not sent:
        sent.append(name)
        os.kill(os.getpid(), signal.SIGINT)

resource_tracker.register = register
from collsynth.core.signals import SafeStartPool

try:
    pool = SafeStartPool(1)
except KeyboardInterrupt:
    print("interrupted after the pool was made")
else:
    print("not interrupted")
"""


@pytest.mark.skipif(sys.platform == "win32", reason="named POSIX semaphores")
def test_a_signal_while_the_pool_is_made_leaks_no_semaphore() -> None:
    done = subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "interrupted after the pool was made", done.stderr
    assert "leaked" not in done.stderr, done.stderr
