"""collsynth.core.signals.cancelled_on_interrupt: a SIGINT or SIGTERM in the block cancels a native call that holds
the main thread (z3's check: tests/encodings/test_sccl_interrupt.py). The signals are raised at fixed points of
the block and every wait ends on an event, so no case depends on timing."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator

import pytest

from collsynth.core.signals import cancelled_on_interrupt

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="Linux signals")
WAIT_S = 60  # a safety net: each wait ends on an event long before


@pytest.fixture
def arrived() -> Iterator[list[int]]:
    """SIGINT and SIGTERM are recorded by a handler that does not raise (as a handler could)."""
    seen: list[int] = []
    previous = {s: signal.signal(s, lambda signum, frame: seen.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)}
    yield seen
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def current_wakeup_fd() -> int:
    fd = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(fd)
    return fd


class Canceller:
    """A cancel that counts its calls; `calls[n]` is set by the n-th call (0-based)."""

    def __init__(self, upto: int = 2) -> None:
        self.calls = [threading.Event() for _ in range(upto)]
        self.count = 0
        self.thread: set[str] = set()

    def __call__(self) -> None:
        self.thread.add(threading.current_thread().name)
        if self.count < len(self.calls):
            self.calls[self.count].set()
        self.count += 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_cancels_from_another_thread_until_the_block_ends(arrived, signum) -> None:
    cancel = Canceller()
    with cancelled_on_interrupt(cancel) as watch:
        signal.raise_signal(signum)
        # repeated: a cancel that came before the native call started would be lost
        assert cancel.calls[1].wait(WAIT_S)
        assert watch.interrupted
    assert arrived == [signum]  # the signal's own handler ran as usual
    assert threading.current_thread().name not in cancel.thread
    assert not [t for t in threading.enumerate() if t.name == "collsynth-interrupt-watcher"]  # none cancels later


def test_a_quiet_block_cancels_nothing_and_restores_the_wakeup_fd(arrived) -> None:
    before = current_wakeup_fd()
    cancel = Canceller()
    with cancelled_on_interrupt(cancel) as watch:
        assert current_wakeup_fd() != before
    assert not watch.interrupted and cancel.count == 0
    assert current_wakeup_fd() == before


def test_the_previous_wakeup_fd_still_hears_of_signals(arrived) -> None:
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    before = signal.set_wakeup_fd(write_end)
    try:
        cancel = Canceller()
        with cancelled_on_interrupt(cancel):
            signal.raise_signal(signal.SIGINT)
            assert cancel.calls[0].wait(WAIT_S)  # forwarded before the first cancel
        assert current_wakeup_fd() == write_end
        assert os.read(read_end, 64) == bytes([signal.SIGINT])
    finally:
        signal.set_wakeup_fd(before)
        os.close(read_end)
        os.close(write_end)


def test_outside_the_main_thread_the_block_runs_unchanged() -> None:
    outcome: list[bool] = []

    def run() -> None:
        with cancelled_on_interrupt(Canceller()) as watch:
            outcome.append(watch.interrupted)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert outcome == [False]
