"""Option types: finite positive seconds, whole numbers within a range and a cap."""

import click
import pytest

from collsynth.cli.params import SECONDS, STEPS_OPTION, CappedInt


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "-1", "0", "x", ""])
def test_seconds_refuses_non_positive_and_non_finite(text):
    with pytest.raises(click.BadParameter, match="time limit in seconds"):
        SECONDS.convert(text, None, None)


def test_seconds_accepts_positive_numbers():
    assert SECONDS.convert("2.5", None, None) == 2.5


@pytest.mark.parametrize(("text", "words"), [("1.5", "not a whole number"), ("1e3", "not a whole number"),
                                             ("0", "below 1"), ("33", "above 32"), ("1_0", "not a whole number")])
def test_capped_int_is_exact(text, words):
    with pytest.raises(click.BadParameter, match=words):
        CappedInt(1, maximum=32).convert(text, None, None)


def test_steps_cap_can_be_raised(monkeypatch):
    with pytest.raises(click.BadParameter, match="COLLSYNTH_MAX_STEPS"):
        STEPS_OPTION.convert("5000", None, None)
    monkeypatch.setenv("COLLSYNTH_MAX_STEPS", "5000")
    assert STEPS_OPTION.convert("5000", None, None) == 5000
