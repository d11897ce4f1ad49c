"""An interrupt that lands in a finalizer (`__del__`, a weakref callback) is not dropped (issue 16): within
`terminate_as_interrupt` it is delivered again after the finalizer returned, with no "Exception ignored" report.
The signal is raised inside the finalizer itself, so no case depends on timing."""

from __future__ import annotations

import signal
import sys
import time
import weakref
from typing import Any

import pytest

from collsynth.core.signals import Terminated, terminate_as_interrupt

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="Linux signals"),
              pytest.mark.usefixtures("ctrl_c_raises")]
INTERRUPTS = [pytest.param(signal.SIGINT, KeyboardInterrupt, id="SIGINT"),
              pytest.param(signal.SIGTERM, Terminated, id="SIGTERM")]


@pytest.fixture
def reported(monkeypatch) -> list[Any]:
    """What reaches the unraisable hook in place before the block (the one that prints "Exception ignored")."""
    seen: list[Any] = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    return seen


class SignalledWhileFreed:
    """Its finalizer is where the signal lands: the handler raises inside `__del__`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum

    def __del__(self) -> None:
        signal.raise_signal(self.signum)


def wait_for_the_interrupt() -> None:
    """Returns (a failure) only if no interrupt came within a minute; the main thread runs pending handlers
    between the sleeps."""
    for _ in range(60_000):
        time.sleep(0.001)


@pytest.mark.parametrize(("signum", "kind"), INTERRUPTS)
def test_an_interrupt_in_del_is_delivered_again(reported, signum, kind) -> None:
    with terminate_as_interrupt(), pytest.raises(kind):
        doomed = SignalledWhileFreed(signum)
        del doomed  # the finalizer runs here
        wait_for_the_interrupt()
    assert reported == []


@pytest.mark.parametrize(("signum", "kind"), INTERRUPTS)
def test_an_interrupt_in_a_weakref_callback_is_delivered_again(reported, signum, kind) -> None:
    class Target:
        pass

    target = Target()
    ref = weakref.ref(target, lambda _: signal.raise_signal(signum))
    with terminate_as_interrupt(), pytest.raises(kind):
        del target
        wait_for_the_interrupt()
    assert ref() is None and reported == []


def test_other_exceptions_in_a_finalizer_are_reported_as_before(reported) -> None:
    class Failing:
        def __del__(self) -> None:
            raise ValueError("broken finalizer")

    with terminate_as_interrupt():
        doomed = Failing()
        del doomed
    assert [u.exc_type for u in reported] == [ValueError]
    assert sys.unraisablehook == reported.append  # the hook in place before the block is back
