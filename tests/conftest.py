import os

import pytest

# Property tests: bounded and deterministic so CI time is predictable.
from hypothesis import settings

settings.register_profile("ci", max_examples=40, deadline=None, derandomize=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def cli_runner():
    from click.testing import CliRunner

    return CliRunner()


@pytest.fixture(autouse=True)
def _collector_left_on():
    """No test may leave Python's cyclic garbage collector off for the tests after it (the compiler, the
    simulator and the tuner pause it, scoped; a leak would change every later test's memory and timing)."""
    yield
    import gc

    assert gc.isenabled(), "this test left the cyclic garbage collector disabled"


@pytest.fixture
def ctrl_c_raises():
    """A runner without job control starts the tests with SIGINT ignored; the signal tests need a terminal's
    Ctrl-C to meet Python's handler (use with pytest.mark.usefixtures("ctrl_c_raises"))."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.fixture
def z3_contexts_freed():
    """Every z3 context made during the test is freed by reference counting by the time the test returns: none is
    left in a reference cycle (a traceback kept in a local, an ExceptionInfo) for the cyclic collector. The
    collector calls the finalizers of a cycle in no set order; when a context's runs before its terms', z3 frees
    the terms it still holds by scanning its whole term table once per level of nesting, which for a big context
    took over 20 minutes (a suite run hung there). The collector is paused for the test, so a cycle cannot be freed
    early and go unnoticed (the test frame itself is freed as the test returns)."""
    import weakref

    import z3

    from collsynth.core.collector import paused_collector

    made: list[weakref.ref] = []
    real_init = z3.Context.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        made.append(weakref.ref(self))

    z3.Context.__init__ = init
    try:
        with paused_collector():
            yield
            left = sum(ref() is not None for ref in made)
    finally:
        z3.Context.__init__ = real_init
    assert not left, f"{left} of {len(made)} z3 contexts outlived the test (held in a reference cycle?)"


# --- long whole-suite computations run in the background ---------------------------------------------
# mypy over the package (~30 s of CPU) and the quick regression suite (~100 s) each start as soon as collection has
# selected a test that reads them, and run beside the rest of the suite on CI's second core; the tests wait for their
# results. What they compute, and what the tests assert, is as before; only where and when it runs changed.

class BackgroundCheck:
    """A checker started as a subprocess in a session of its own (output to a file, so a long report cannot block it
    on a full pipe; not a multiprocessing child, so tests that count those do not see it); `result()` waits for
    it. Started once per session, when collection has selected the test that reads it."""

    def __init__(self, command: list[str]) -> None:
        import subprocess
        import tempfile

        self.scratch = tempfile.TemporaryDirectory(prefix="collsynth-check-")
        self._output = open(os.path.join(self.scratch.name, "output.txt"), "w+b")  # noqa: SIM115 closed in stop()
        self.process = subprocess.Popen([part.replace("{scratch}", self.scratch.name) for part in command],
                                        stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def result(self) -> tuple[int, str]:
        status = self.process.wait()
        self._output.seek(0)
        return status, self._output.read().decode("utf-8", "replace")

    def stop(self) -> None:
        import signal

        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self._output.close()
        self.scratch.cleanup()


class BackgroundCall(BackgroundCheck):
    """`fn(*args)` (fn importable by name, args picklable) in a fresh Python process, the way the catalog isolates
    an item (`python -m collsynth.catalog.isolate`: it dies with this process); `result()` returns its value or
    raises its exception."""

    def __init__(self, fn, *args) -> None:
        import pickle
        import sys
        import tempfile

        fd, self._call_path = tempfile.mkstemp(prefix="collsynth-call-", suffix=".pickle")
        with os.fdopen(fd, "wb") as file:
            file.write(pickle.dumps((fn, args)))
        super().__init__([sys.executable, "-m", "collsynth.catalog.isolate", self._call_path,
                          os.path.join("{scratch}", "answer.pickle"), str(os.getpid())])

    def result(self):
        import pickle

        status, output = super().result()
        answer = os.path.join(self.scratch.name, "answer.pickle")
        if not os.path.isfile(answer):
            raise RuntimeError(f"the background call exited with {status} and no answer: {output[-2000:]}")
        with open(answer, "rb") as file:
            ok, value = pickle.load(file)
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        super().stop()
        os.unlink(self._call_path)


def _mypy_command() -> list[str]:
    import sys
    from pathlib import Path

    import collsynth

    root = Path(collsynth.__file__).resolve().parent.parent
    return [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"),
            "--cache-dir", os.path.join("{scratch}", "mypy_cache"), str(root / "collsynth")]


_MYPY = pytest.StashKey["BackgroundCheck"]()


# The quick suite's solver and item limits (60 s, 300 s of wall time) are for users; a test must not depend on the
# machine's load (a loaded machine lost a frontier point to the 60 s limit), so the test's run has limits no solve
# reaches: each solve then finishes, with the answer it gives on an idle machine within 60 s (the baseline's).
_LIMIT_NO_SOLVE_REACHES_S = 1e6


def _quick_suite_without_wall_limits():
    from dataclasses import replace

    from collsynth.regress import load_suite

    plan = load_suite(quick=True)
    synthesizers = tuple(replace(spec, params=tuple(sorted({**dict(spec.params),
                                                           "time_limit_s": _LIMIT_NO_SOLVE_REACHES_S}.items())))
                         for spec in plan.synthesizers)
    return replace(plan, synthesizers=synthesizers, item_timeout_s=_LIMIT_NO_SOLVE_REACHES_S)


def _start_quick_regression() -> BackgroundCall:
    from collsynth.regress import BASELINE_PATH, load_baseline, regress

    return BackgroundCall(regress, _quick_suite_without_wall_limits(), load_baseline(BASELINE_PATH))


_QUICK_REGRESSION = pytest.StashKey["BackgroundCall"]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if session.config.option.collectonly:
        return
    selected = {item.path.name for item in session.items}
    if "test_regress_quick.py" in selected:
        session.config.stash[_QUICK_REGRESSION] = _start_quick_regression()
    if "test_typecheck.py" in selected:
        session.config.stash[_MYPY] = BackgroundCheck(_mypy_command())


def pytest_unconfigure(config: pytest.Config) -> None:
    for key in (_MYPY, _QUICK_REGRESSION):
        started = config.stash.get(key, None)
        if started is not None:
            started.stop()


@pytest.fixture(scope="session")
def quick_regression(request: pytest.FixtureRequest) -> BackgroundCall:
    """`regress(quick suite, shipped baseline)`, started at the end of collection (or now)."""
    config = request.config
    if _QUICK_REGRESSION not in config.stash:
        config.stash[_QUICK_REGRESSION] = _start_quick_regression()
    return config.stash[_QUICK_REGRESSION]


@pytest.fixture(scope="session")
def mypy_run(request: pytest.FixtureRequest) -> BackgroundCheck:
    """mypy over the package, started at the end of collection (or now, where collection did not start it)."""
    config = request.config
    if _MYPY not in config.stash:
        config.stash[_MYPY] = BackgroundCheck(_mypy_command())
    return config.stash[_MYPY]
