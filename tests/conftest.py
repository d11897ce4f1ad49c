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
