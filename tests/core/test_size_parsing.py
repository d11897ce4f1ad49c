"""Sizes as users write them: exact byte counts (no float rounding), within a named cap, and every bad spelling
one SizeError line (never an OverflowError)."""

from __future__ import annotations

import pytest

from collsynth.core.units import SizeError, parse_size


@pytest.mark.parametrize(("text", "nbytes"), [("1MB", 1 << 20), ("1.5KB", 1536), ("512", 512), ("1.5G", 3 << 29),
                                              ("1TB", 1 << 40), ("1024T", 1 << 50), ("1125899906842623", (1 << 50) - 1),
                                              (0, 0), (4096, 4096)])
def test_sizes_are_read_exactly(text, nbytes) -> None:
    assert parse_size(text) == nbytes


@pytest.mark.parametrize(("text", "message"), [
    ("99999999999999999999G", "above the cap of 1125899906842624 bytes; raise it with COLLSYNTH_MAX_SIZE_BYTES=N"),
    ("9" * 400, "(400 digits): inf bytes is above the cap"),  # was OverflowError: float infinity to integer
    ("1025T", "above the cap"), (1 << 60, "above the cap"),
    ("1.0000000000000001K", "is not a whole number of bytes"),  # a float read it as 1024
    ("1e300", "cannot read size"), ("nan", "cannot read size"), ("-1", "cannot read size"), (-1, "is negative"),
])
def test_bad_or_huge_sizes_are_one_size_error(text, message) -> None:
    with pytest.raises(SizeError, match=None) as raised:
        parse_size(text)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_the_size_cap_is_raised_by_its_variable(monkeypatch) -> None:
    monkeypatch.setenv("COLLSYNTH_MAX_SIZE_BYTES", str(1 << 60))
    assert parse_size("99999T") == 99999 << 40
