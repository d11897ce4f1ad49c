"""The SMT portfolio's slices are z3 resource units, not seconds: the same answers on an idle and a loaded machine."""

import gc
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest
import z3

from collsynth.collectives import make_collective
from collsynth.core.enums import Status
from collsynth.encodings.sccl_z3 import SCCLEncoding, resource_count
from collsynth.synth.portfolio import InstanceSolver
from collsynth.topologies import dgx1

SAT, TIMEOUT = Status.SAT, Status.TIMEOUT

# Runs one portfolio question in a fresh process (z3's answers also depend on what its process solved before)
# with tiny slices, so that many tasks race and time out before one answers, and prints what happened.
RACE = """
import json
from collsynth.collectives import make_collective
from collsynth.encodings import sccl_z3
from collsynth.synth import portfolio
from collsynth.topologies import dgx1

portfolio.FIRST_SLICE_UNITS = 20_000
calls = []
solve = sccl_z3.StepEncoding.solve

def recorded(self, *args, **kwargs):
    outcome = solve(self, *args, **kwargs)
    calls.append([len(self.symmetries), kwargs.get("split"), kwargs.get("seed"), outcome.status])
    return outcome

sccl_z3.StepEncoding.solve = recorded
outcome = portfolio.InstanceSolver(dgx1(), make_collective("allgather", 8, 6), 3).solve(7, 120)
print(json.dumps({"status": outcome.status, "schedule": outcome.schedule, "calls": calls}))
"""


def race(nice: int = 0) -> dict:
    command = [sys.executable, "-c", RACE]
    if nice:
        command = ["nice", "-n", str(nice), *command]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    return json.loads(done.stdout)


@pytest.mark.skipif(shutil.which("nice") is None, reason="needs nice")
def test_same_answer_idle_and_under_load():
    idle = race()
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])  # competes for the CPU meanwhile
    try:
        loaded = race(nice=5)
    finally:
        hog.kill()
        hog.wait()
    assert idle["status"] == SAT
    assert sum(1 for call in idle["calls"] if call[3] == TIMEOUT) >= 5  # a real race between tasks
    assert loaded["calls"] == idle["calls"]
    assert loaded["schedule"] == idle["schedule"]


def test_a_fresh_context_per_solver_gives_the_standalone_answer(monkeypatch):
    # what this process solved before (other instances, the same one) must not change the answer: each
    # InstanceSolver has its own z3 context, so no fresh process is needed for a reproducible answer
    from collsynth.encodings import sccl_z3
    from collsynth.synth import portfolio

    standalone = race()
    InstanceSolver(dgx1(), make_collective("allgather", 8, 2), 2).solve(3, 60)  # earlier work in this process
    InstanceSolver(dgx1(), make_collective("allgather", 8, 6), 3).solve(8, 60)
    monkeypatch.setattr(portfolio, "FIRST_SLICE_UNITS", 20_000)
    calls = []
    solve = sccl_z3.StepEncoding.solve

    def recorded(self, *args, **kwargs):
        outcome = solve(self, *args, **kwargs)
        calls.append([len(self.symmetries), kwargs.get("split"), kwargs.get("seed"), outcome.status])
        return outcome

    monkeypatch.setattr(sccl_z3.StepEncoding, "solve", recorded)
    outcome = InstanceSolver(dgx1(), make_collective("allgather", 8, 6), 3).solve(7, 120)
    again = json.loads(json.dumps({"status": outcome.status, "schedule": outcome.schedule, "calls": calls}))
    assert again == standalone


def test_resource_limit_counts_from_each_call():
    enc = SCCLEncoding(dgx1(), make_collective("alltoall", 8, 8), 3)
    for seed in range(2):
        before = resource_count(enc.solver)
        outcome = enc.solve(21, time_limit=60, seed=seed, units=300_000)
        spent = resource_count(enc.solver) - before
        # out of units is a time-out, not Ctrl-C; the limit is relative to the count at the call's start
        assert outcome.status == TIMEOUT
        assert 300_000 <= spent < 3_000_000
        assert outcome.seconds < 30


def test_budget_caps_a_question():
    solver = InstanceSolver(dgx1(), make_collective("alltoall", 8, 8), 3, budget=2_000_000)
    before = resource_count(solver.full.solver)
    outcome = solver.solve(21, time_limit=60)
    assert outcome.status == TIMEOUT and outcome.seconds < 30
    assert 2_000_000 <= resource_count(solver.full.solver) - before < 20_000_000


@pytest.mark.skipif(os.name != "posix", reason="sends SIGINT to itself")
def test_ctrl_c_still_interrupts_a_search(monkeypatch):
    # Proving this unsat takes far longer than the test: only Ctrl-C ends the call early. The Ctrl-C is sent
    # while z3 searches (a check running for 0.3 s), never on a timer: on a loaded machine a timer fires while
    # the encodings are still being built, where a signal can land in a z3 object's __del__ and be swallowed as
    # an "unraisable" exception, which is not what this test is about. The claim checked: the first Ctrl-C
    # that reaches a running search ends the call with KeyboardInterrupt, promptly. A Ctrl-C that the watcher
    # sent as a search was ending (it landed after it) does not count, and the next search gets another.
    solver = InstanceSolver(dgx1(), make_collective("alltoall", 8, 8), 3)
    solver.full  # noqa: B018 -- build the encodings before the first search
    gc.collect()
    spans: list[list[float]] = []  # [start, end] of each z3 check (end inf while it runs)
    real_check = z3.Solver.check

    def timed_check(self, *args):
        span = [time.perf_counter(), math.inf]
        spans.append(span)
        try:
            return real_check(self, *args)
        finally:
            span[1] = time.perf_counter()

    monkeypatch.setattr(z3.Solver, "check", timed_check)
    sent: list[float] = []
    finished = threading.Event()

    def ctrl_c_during_searches():
        while not finished.wait(0.01):
            span = spans[-1] if spans else None
            if span and span[1] == math.inf and time.perf_counter() - span[0] >= 0.3 and \
                    (not sent or sent[-1] < span[0]):  # one Ctrl-C per search
                sent.append(time.perf_counter())
                os.kill(os.getpid(), signal.SIGINT)

    watcher = threading.Thread(target=ctrl_c_during_searches, daemon=True)
    watcher.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            solver.solve(21, time_limit=120)
        ended = time.perf_counter()
    finally:
        finished.set()
        watcher.join()
    landed = [t for t in sent if any(start < t < end for start, end in spans)]
    assert landed, f"no Ctrl-C reached a running search ({len(sent)} sent)"
    assert sent[-1] == landed[0], "a Ctrl-C reached a running search and was absorbed: another one was needed"
    assert ended - landed[0] < 20
