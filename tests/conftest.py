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
