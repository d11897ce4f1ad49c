import os
import stat

import pytest

from collsynth.files import atomic_path, write_atomic


def test_write_atomic_gives_the_mode_a_plain_open_would(tmp_path):
    old = os.umask(0o027)
    try:
        path = write_atomic(tmp_path / "a.xml", "<algo/>")
        plain = tmp_path / "plain.xml"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode) == 0o640
    assert path.read_text() == "<algo/>"


def test_a_failed_write_leaves_nothing(tmp_path):
    target = tmp_path / "out.json"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("interrupted")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
