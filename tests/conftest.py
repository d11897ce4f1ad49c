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


# --- whole-package checks run in the background ----------------------------------------------------

class BackgroundCheck:
    """A checker started as a subprocess (output to a file, so a long report cannot block it on a full pipe);
    `result()` waits for it. Started once per session, when collection has selected the test that reads it."""

    def __init__(self, command: list[str]) -> None:
        import subprocess
        import tempfile

        self.scratch = tempfile.TemporaryDirectory(prefix="collsynth-check-")
        self._output = open(os.path.join(self.scratch.name, "output.txt"), "w+b")  # noqa: SIM115 closed in stop()
        self.process = subprocess.Popen([part.replace("{scratch}", self.scratch.name) for part in command],
                                        stdin=subprocess.DEVNULL, stdout=self._output, stderr=subprocess.STDOUT)

    def result(self) -> tuple[int, str]:
        status = self.process.wait()
        self._output.seek(0)
        return status, self._output.read().decode("utf-8", "replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self._output.close()
        self.scratch.cleanup()


def _mypy_command() -> list[str]:
    import sys
    from pathlib import Path

    import collsynth

    root = Path(collsynth.__file__).resolve().parent.parent
    return [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"),
            "--cache-dir", os.path.join("{scratch}", "mypy_cache"), str(root / "collsynth")]


_MYPY = pytest.StashKey["BackgroundCheck"]()


def pytest_collection_finish(session: pytest.Session) -> None:
    if any(item.path.name == "test_typecheck.py" for item in session.items):
        session.config.stash[_MYPY] = BackgroundCheck(_mypy_command())


def pytest_unconfigure(config: pytest.Config) -> None:
    check = config.stash.get(_MYPY, None)
    if check is not None:
        check.stop()


@pytest.fixture(scope="session")
def mypy_run(request: pytest.FixtureRequest) -> BackgroundCheck:
    """mypy over the package, started at the end of collection (or now, where collection did not start it)."""
    config = request.config
    if _MYPY not in config.stash:
        config.stash[_MYPY] = BackgroundCheck(_mypy_command())
    return config.stash[_MYPY]
