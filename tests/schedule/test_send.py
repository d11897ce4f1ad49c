"""`Send`: slotted (no per-send dict), equal however it is made, and pickles of the old dict layout still load."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from collsynth.schedule.algorithm import COPY, REDUCE, Send, send_of_fields


def test_send_has_slots_and_stays_frozen() -> None:
    send = Send(3, 0, 1)
    assert not hasattr(send, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        send.chunk = 4  # type: ignore[misc]


@pytest.mark.parametrize("fields", [(3, 0, 1, COPY, None, None), (7, 2, 5, REDUCE, 1.5, 0.25)])
def test_send_of_fields_equals_the_constructor(fields) -> None:
    made, built = send_of_fields(*fields), Send(*fields)
    assert made == built and hash(made) == hash(built) and str(made) == str(built)


def test_send_pickles_round_trip() -> None:
    send = Send(7, 2, 5, REDUCE, 1.5, 0.25)
    assert pickle.loads(pickle.dumps(send)) == send


def test_a_pickle_of_the_dict_layout_still_loads() -> None:
    # what pickle wrote for Send before it had slots: the class, then the instance dict as its state
    old = Send.__new__(Send)
    old.__setstate__({"chunk": 7, "src": 2, "dst": 5, "op": REDUCE, "start_us": 1.5, "duration_us": 0.25})
    assert old == Send(7, 2, 5, REDUCE, 1.5, 0.25)
