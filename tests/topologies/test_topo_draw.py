"""draw_topology: pictures in every format, atomically, with clear errors."""

import os

import pytest

from collsynth.topologies import TopologyError, builtin, draw_topology


@pytest.mark.parametrize("name", ["dgx1", "2xdgx2", "torus:3x3x3", "hub_and_spoke:5"])
def test_draw_writes_a_picture(tmp_path, name):
    out = draw_topology(builtin(name), tmp_path / "t.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(os.listdir(tmp_path)) == ["t.png"]


def test_draw_svg_and_bad_suffix(tmp_path):
    out = draw_topology(builtin("2xring:3"), tmp_path / "t.svg")
    assert b"<svg" in out.read_bytes()[:400]
    with pytest.raises(TopologyError, match="suffix"):
        draw_topology(builtin("ring:3"), tmp_path / "t.txt")
    with pytest.raises(TopologyError, match="does not exist"):
        draw_topology(builtin("ring:3"), tmp_path / "nope" / "t.png")
