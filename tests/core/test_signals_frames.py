"""collsynth.core.signals.release_frames: what the frames of an interrupt (and of the exceptions chained to it)
held is freed at once by reference counting, even while those exceptions sit in a reference cycle; and
keeping_finished_work, the block in which a command saves its work after an interrupt."""

from __future__ import annotations

import signal
import weakref
from collections.abc import Callable

import pytest

from collsynth.core.collector import paused_collector
from collsynth.core.signals import keeping_finished_work, release_frames


class Held:
    """Stands for a z3 context a sweep's frame holds."""


def failing_with(work: Held) -> Callable[[], None]:
    def deep() -> None:  # a closure over the work: a cleared frame still holds its function
        assert work is not None
        raise KeyboardInterrupt

    return deep


def interrupted_with(held: list[weakref.ref]) -> KeyboardInterrupt:
    work = Held()
    held.append(weakref.ref(work))
    deep = failing_with(work)
    del work  # only deep's closure holds it now
    try:
        deep()
    except KeyboardInterrupt as stop:
        return stop
    raise AssertionError("not interrupted")


def chained_in_a_cycle(held: list[weakref.ref]) -> ValueError:
    """A later exception raised while the interrupt was handled, kept in a cycle (as a parser's cache does)."""
    try:
        raise interrupted_with(held)
    except KeyboardInterrupt:
        try:
            raise ValueError("raised while handling it")
        except ValueError as later:
            later.args = (later,)  # the cycle
            return later


def test_the_work_held_by_an_interrupts_frames_is_freed_at_once() -> None:
    held: list[weakref.ref] = []
    with paused_collector():
        later = chained_in_a_cycle(held)
        del later  # only the cycle holds it now
        assert held[0]() is not None  # without release_frames: kept until the collector runs
        held.clear()
        later = chained_in_a_cycle(held)
        release_frames(later)
        del later
        assert held[0]() is None


def test_a_running_frame_is_left_alone() -> None:
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as stop:
        mine = "still here"
        release_frames(stop)  # this frame is in the traceback and still running
        assert mine == "still here"


@pytest.mark.usefixtures("ctrl_c_raises")
def test_work_is_kept_with_the_interrupted_frames_gone_and_signals_held() -> None:
    held: list[weakref.ref] = []
    stop = interrupted_with(held)
    # the second Ctrl-C, held while the work is saved, is raised as the block ends
    with paused_collector(), pytest.raises(KeyboardInterrupt), keeping_finished_work(stop):
        assert held[0]() is None  # dropped before the saving starts
        signal.raise_signal(signal.SIGINT)
        saved = True
    assert saved
