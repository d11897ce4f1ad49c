"""Ctrl-C and SIGTERM while HiGHS solves (issue 16): HiGHS is stopped through its user-interrupt callback and the
interrupt raised at once, not after HiGHS's time limit. No case depends on timing: the model cannot be solved in
any test's lifetime, and the signal is sent once HiGHS runs (in its own thread)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import highspy
import numpy as np
import pytest

from collsynth.core.signals import Terminated, terminate_as_interrupt
from collsynth.encodings import milp_solvers
from collsynth.encodings.milp_solvers import LpMatrix, solve_matrix

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="sends signals to itself"),
              pytest.mark.usefixtures("ctrl_c_raises")]


def market_split(rows: int = 6, columns: int = 60, seed: int = 1) -> LpMatrix:
    """A market-split feasibility problem (Cornuejols and Dawande): binary x with A x = b, b half of each row's
    sum. Branch and bound needs far more nodes than any test can wait for at this size."""
    a = np.random.default_rng(seed).integers(0, 100, size=(rows, columns)).astype(np.float64)
    b = np.floor(a.sum(axis=1) / 2)
    csc = [(np.nonzero(a[:, j])[0], a[np.nonzero(a[:, j])[0], j]) for j in range(columns)]
    start = np.cumsum([0] + [len(idx) for idx, _ in csc])
    return LpMatrix("market_split", np.zeros(columns), np.zeros(columns), np.ones(columns),
                    np.ones(columns, dtype=bool), b, b, start, np.concatenate([idx for idx, _ in csc]),
                    np.concatenate([val for _, val in csc]))


@contextmanager
def signal_once_running(started: threading.Event, signum: int) -> Iterator[None]:
    """Sends `signum` to this process once `started` is set."""
    done = threading.Event()

    def send() -> None:
        while not done.wait(0.005):
            if started.is_set():
                os.kill(os.getpid(), signum)
                return

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


@pytest.fixture
def instances(monkeypatch) -> tuple[list[Any], threading.Event]:
    """The HiGHS instances the driver makes, and an event set once one of them runs (in its own thread)."""
    made: list[Any] = []
    running = threading.Event()
    real = milp_solvers._quiet_highs

    def quiet_highs() -> Any:
        h = real()
        start = h.startSolve

        def started() -> Any:
            thread = start()
            running.set()
            return thread

        h.startSolve = started
        made.append(h)
        return h

    monkeypatch.setattr(milp_solvers, "_quiet_highs", quiet_highs)
    return made, running


@pytest.mark.parametrize(("signum", "kind"), [pytest.param(signal.SIGINT, KeyboardInterrupt, id="SIGINT"),
                                              pytest.param(signal.SIGTERM, Terminated, id="SIGTERM")])
def test_an_interrupt_stops_highs_and_is_raised(instances, signum, kind) -> None:
    made, running = instances
    with terminate_as_interrupt(), signal_once_running(running, signum), pytest.raises(kind):
        solve_matrix(market_split(), "highs", time_limit=120, gap=0.0, warm=None)
    (h,) = made
    assert h.getModelStatus() == highspy.HighsModelStatus.kInterrupt  # stopped by us, not by its time limit
    assert not h.is_solver_running()


def test_an_uninterrupted_solve_answers_as_before() -> None:
    easy = market_split(rows=1, columns=8)
    result = solve_matrix(easy, "highs", time_limit=60, gap=0.0, warm=None)
    assert result.status in ("optimal", "infeasible")
