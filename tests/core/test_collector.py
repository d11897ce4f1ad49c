"""paused_collector: the cyclic garbage collector off inside, back as it was after (also after an error)."""

import gc
import weakref

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


class _Node:
    """A tracked object that can hold a cycle and be watched by a weak reference."""

    def __init__(self) -> None:
        self.other: object = None


def _in_generation(obj: object, generation: int) -> bool:
    return any(o is obj for o in gc.get_objects(generation=generation))


def test_promote_moves_what_the_pause_made_to_the_oldest_generation():
    with paused_collector(promote=True):
        kept = _Node()
        assert _in_generation(kept, 0)
    assert _in_generation(kept, 2) and not _in_generation(kept, 0)
    with paused_collector():  # without promote: left where it is
        young = _Node()
    assert not _in_generation(young, 2)  # (a young collection may have moved it to generation 1 since)


def test_promoted_cycles_are_still_collected():
    with paused_collector(promote=True):
        node = _Node()
        node.other = _Node()
        node.other.other = node  # a cycle: only the collector frees it
        watch = weakref.ref(node)
    del node
    assert watch() is not None
    gc.collect()
    assert watch() is None


def test_promote_leaves_a_callers_frozen_objects_frozen():
    frozen = _Node()
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with paused_collector(promote=True):
            _Node()
        assert gc.get_freeze_count() == count
        assert not any(_in_generation(frozen, g) for g in range(3))
    finally:
        gc.unfreeze()
