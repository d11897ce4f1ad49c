"""Ctrl-C and SIGTERM during a z3 check (issue 16): the check is cancelled and the signal raised as it returns,
never reported as a time-out, and a sweep keeps the points it had. z3 is told to leave SIGINT alone (its own
handler would absorb a Ctrl-C that lands as a check ends); collsynth cancels the check itself.

No case depends on timing: the check is made endless (a pigeonhole formula, exponential for z3's resolution
proofs, is added to it) and the signal is sent once the main thread is seen waiting inside z3's check. Each case
keeps z3's state small (a 14-pigeon formula, and the check is cancelled within milliseconds of its start) and
frees every context it made by reference counting, never through the cyclic collector (`z3_contexts_freed`)."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import z3

from collsynth.collectives import make_collective
from collsynth.core.enums import Status
from collsynth.core.signals import Terminated, terminate_as_interrupt
from collsynth.encodings import sccl_z3
from collsynth.encodings.sccl_z3 import SCCLEncoding
from collsynth.synth.pareto import SweepInterrupted, pareto_frontier
from collsynth.topologies import dgx1, ring

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="sends signals to itself"),
              pytest.mark.usefixtures("ctrl_c_raises", "z3_contexts_freed")]

NATIVE_CHECK = "Z3_solver_check_assumptions"  # z3's ctypes wrapper: its frame is on top while z3 searches
# z3 needs ~9x longer per added pigeon (measured alone in a solver: 10 pigeons 12 s of CPU, 11 over 35 s), so 14
# is hours: endless for a test, yet only 182 variables and 1,197 clauses
PIGEONS = 14


def add_pigeonholes(solver: z3.Solver) -> None:
    """Unsatisfiable, and no z3 check of it ends: PIGEONS pigeons, each in one of PIGEONS - 1 holes, none shared."""
    ctx = solver.ctx
    x = [[z3.Bool(f"pigeon_{p}_{h}", ctx) for h in range(PIGEONS - 1)] for p in range(PIGEONS)]
    solver.add(*[z3.Or(row) for row in x])
    solver.add(*[z3.Or(z3.Not(x[a][h]), z3.Not(x[b][h]))
                 for h in range(PIGEONS - 1) for a in range(PIGEONS) for b in range(a + 1, PIGEONS)])


@contextmanager
def endless_checks(monkeypatch: pytest.MonkeyPatch, after: threading.Event | None = None) -> Iterator[None]:
    """Every z3 check (from when `after` is set, if given) is made endless."""
    real_check = z3.Solver.check

    def check(self: z3.Solver, *assumptions: z3.ExprRef) -> z3.CheckSatResult:
        if after is None or after.is_set():
            add_pigeonholes(self)
        return real_check(self, *assumptions)

    monkeypatch.setattr(z3.Solver, "check", check)
    yield


@contextmanager
def signal_during_check(signum: int, after: threading.Event | None = None) -> Iterator[list[int]]:
    """Sends `signum` to this process once, as soon as the main thread is inside z3's native check (from when
    `after` is set, if given); yields the list of signals sent."""
    main = threading.main_thread().ident
    sent: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.005):
            frame = sys._current_frames().get(main)
            if (after is None or after.is_set()) and frame is not None and frame.f_code.co_name == NATIVE_CHECK:
                os.kill(os.getpid(), signum)
                sent.append(signum)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield sent
    finally:
        done.set()
        thread.join()


def small_encoding() -> SCCLEncoding:
    """Made in the test, not by a fixture: pytest keeps fixture values until after every teardown, and
    `z3_contexts_freed` checks that the test's contexts are gone when it returns."""
    return SCCLEncoding(ring(4), make_collective("allgather", 4), 3)


def test_ctrl_c_cancels_the_check_and_is_raised(monkeypatch) -> None:
    encoding = small_encoding()
    with endless_checks(monkeypatch), signal_during_check(signal.SIGINT) as sent, pytest.raises(KeyboardInterrupt):
        encoding.solve(6, time_limit=None)
    assert sent == [signal.SIGINT]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # z3 left it alone


def test_ctrl_c_as_the_time_limit_runs_out_is_no_time_out(monkeypatch) -> None:
    encoding = small_encoding()
    # z3 reports a cancelled check as "unknown" whatever cancelled it; the clock must not decide it was the limit
    # (the clock is made to say the whole limit has passed by the time the check returns)
    clock = iter(range(0, 10_000, 100))
    monkeypatch.setattr(sccl_z3, "time", SimpleNamespace(perf_counter=lambda: float(next(clock))))
    with endless_checks(monkeypatch), signal_during_check(signal.SIGINT), pytest.raises(KeyboardInterrupt):
        encoding.solve(6, time_limit=100)


def test_a_ctrl_c_whose_handler_does_not_raise_still_ends_the_question(monkeypatch) -> None:
    encoding = small_encoding()
    # the check was cancelled by the user: reported as an interrupt, not as "unknown" (a time-out)
    arrived: list[int] = []
    signal.signal(signal.SIGINT, lambda signum, frame: arrived.append(signum))
    with endless_checks(monkeypatch), signal_during_check(signal.SIGINT), pytest.raises(KeyboardInterrupt):
        encoding.solve(6, time_limit=None)
    assert arrived == [signal.SIGINT]


def test_sigterm_cancels_the_check_and_is_raised_as_terminated(monkeypatch) -> None:
    encoding = small_encoding()
    # before, a SIGTERM waited for the check's time limit (here: none)
    with terminate_as_interrupt(), endless_checks(monkeypatch), signal_during_check(signal.SIGTERM), \
            pytest.raises(Terminated):
        encoding.solve(6, time_limit=None)


def test_the_context_answers_after_an_interrupt(monkeypatch) -> None:
    encoding = small_encoding()
    with monkeypatch.context() as patch, endless_checks(patch), signal_during_check(signal.SIGINT), \
            pytest.raises(KeyboardInterrupt):
        encoding.solve(6, time_limit=None)
    # the cancel did not stick to the context: another encoding in it (as in a portfolio) answers
    other = SCCLEncoding(ring(4), make_collective("allgather", 4), 3, context=encoding.context)
    assert other.solve(6, time_limit=60).status == Status.SAT


def test_a_worker_encoding_leaves_signals_to_its_parent(monkeypatch) -> None:
    enc = SCCLEncoding(ring(4), make_collective("allgather", 4), 3, interruptible=False)
    seen = []
    monkeypatch.setattr(sccl_z3, "cancelled_on_interrupt", lambda cancel: seen.append(cancel))
    assert enc.solve(6, time_limit=60).status == Status.SAT and not seen


def test_a_sweep_interrupted_in_a_check_keeps_its_points(monkeypatch) -> None:
    two_points = threading.Event()
    points = []

    def on_event(kind: str, payload: object) -> None:
        if kind == "point":
            points.append(payload)
            if len(points) == 2:
                two_points.set()

    with endless_checks(monkeypatch, after=two_points), signal_during_check(signal.SIGINT, after=two_points) as sent, \
            pytest.raises(SweepInterrupted) as info:
        pareto_frontier(dgx1(), make_collective("allgather", 8), on_event=on_event)
    partial = info.value.result
    assert sent and [(p.chunks, p.steps, p.rounds) for p in partial.points] == [(1, 2, 2), (2, 2, 3)]
    assert partial.stopped == "interrupted"
