# collsynth/units.py is a top-level helper; its tests live with its first user, the runtime.
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.core.errors import CollsynthError
from collsynth.core.units import SizeError, format_size, parse_size


@pytest.mark.parametrize("text, value", [
    ("1048576", 1 << 20), ("1KB", 1024), ("4MB", 4 << 20), ("1GB", 1 << 30), ("1gb", 1 << 30), ("2 MiB", 2 << 20),
    ("64K", 64 << 10), ("1.5KB", 1536), ("0", 0), ("512B", 512), (" 8M ", 8 << 20), (4096, 4096),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "MB", "1.3B", "-1", "1 PB", "one", "1.0001KB", True])
def test_bad_sizes_are_one_line_errors(text):
    with pytest.raises(SizeError) as info:
        parse_size(text)
    assert issubclass(SizeError, CollsynthError) and "\n" not in str(info.value)


@pytest.mark.parametrize("value, text", [(1 << 20, "1MB"), (1536, "1.5KB"), (100, "100B"), (1 << 30, "1GB"),
                                         (3 << 40, "3TB"), (1000000, "976.56KB")])
def test_format_size(value, text):
    assert format_size(value) == text


@given(st.integers(1, 1023), st.sampled_from([1, 1 << 10, 1 << 20, 1 << 30]), st.sampled_from([0, 25, 50, 75]))
def test_format_then_parse_round_trips(whole, unit, hundredths):
    value = whole * unit + (hundredths * unit // 100 if unit > 1 else 0)
    assert parse_size(format_size(value)) == value
