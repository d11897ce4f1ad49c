import os
import stat

import pytest

from collsynth.core.files import atomic_path, write_atomic


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


def test_read_json_file_names_the_file_and_the_problem(tmp_path):
    from collsynth.core.errors import CollsynthError
    from collsynth.core.files import read_json_file

    good = tmp_path / "a.json"
    good.write_text('{"x": [1, 2]}')
    assert read_json_file(good, CollsynthError) == {"x": [1, 2]}
    bad = tmp_path / "b.json"
    bad.write_text('{"x": \n oops}')
    with pytest.raises(CollsynthError, match=r"b.json: not valid JSON \(.* at line 2, column 2\)"):
        read_json_file(bad, CollsynthError)
    with pytest.raises(CollsynthError, match=r"missing.json: cannot read the sketch \("):
        read_json_file(tmp_path / "missing.json", CollsynthError, "the sketch")
