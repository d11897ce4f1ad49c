"""paused_collector: the cyclic garbage collector off inside, back as it was after (also after an error)."""

import gc

import pytest

from collsynth.core.collector import paused_collector


@pytest.fixture(autouse=True)
def collector_on():
    """Each test starts with the collector on and leaves it as the suite had it (a test here turns it off)."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_paused_inside_and_restored_after():
    with paused_collector():
        assert not gc.isenabled()
        with paused_collector():  # nested: the inner end leaves it paused
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_after_an_error():
    with pytest.raises(ValueError), paused_collector():
        raise ValueError("boom")
    assert gc.isenabled()


def test_left_off_when_it_was_off():
    gc.disable()
    with paused_collector():
        pass
    assert not gc.isenabled()
