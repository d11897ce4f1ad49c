"""Sanity caps name themselves and their variable; the variable raises them."""

import pytest

from collsynth.core.caps import RANKS, CapError


def test_cap_names_itself_and_its_variable(monkeypatch):
    monkeypatch.delenv("COLLSYNTH_MAX_RANKS", raising=False)
    RANKS.check(16384, "x")
    with pytest.raises(CapError, match=r"^f\.json: num_ranks: 16385 ranks is above the cap of 16384 ranks; raise it "
                                       r"with COLLSYNTH_MAX_RANKS=N if you mean it$"):
        RANKS.check(16385, "f.json: num_ranks")


def test_variable_raises_the_cap_and_bad_values_are_ignored(monkeypatch):
    monkeypatch.setenv("COLLSYNTH_MAX_RANKS", "100000")
    RANKS.check(100000, "x")
    for junk in ("-5", "lots", "0", ""):
        monkeypatch.setenv("COLLSYNTH_MAX_RANKS", junk)
        assert RANKS.limit() == RANKS.default
