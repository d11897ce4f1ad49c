import os
import stat

import pytest

from collsynth.core.files import OutputError, atomic_path, write_atomic, write_atomic_pieces


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
    with pytest.raises(CollsynthError, match=r"missing.json: no such file; give the path of the sketch"):
        read_json_file(tmp_path / "missing.json", CollsynthError, "the sketch")


# --- one reader path: special files, size caps, decoding, nesting ---------------------------------------------

def _one_line_error(call):
    from collsynth.core.files import InputFileError

    with pytest.raises(InputFileError) as info:
        call()
    message = str(info.value)
    assert "\n" not in message
    return message


def test_reader_refuses_special_files_without_blocking(tmp_path):
    from collsynth.core.files import read_json_file

    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)  # no writer: a blocking open would hang forever
    assert "not a regular file" in _one_line_error(lambda: read_json_file(fifo))
    assert "not a regular file" in _one_line_error(lambda: read_json_file("/dev/zero"))
    assert "is a directory" in _one_line_error(lambda: read_json_file(tmp_path))


def test_reader_caps_the_size_and_names_the_variable(tmp_path, monkeypatch):
    from collsynth.core.files import read_bytes

    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2000)
    monkeypatch.setenv("COLLSYNTH_MAX_INPUT_BYTES", "1000")
    assert "COLLSYNTH_MAX_INPUT_BYTES" in _one_line_error(lambda: read_bytes(big))
    monkeypatch.setenv("COLLSYNTH_MAX_INPUT_BYTES", "4000")
    assert read_bytes(big) == b" " * 2000


def test_reader_reports_bad_bytes_nan_and_deep_nesting(tmp_path):
    from collsynth.core.files import read_json_file

    latin = tmp_path / "latin.json"
    latin.write_bytes(b'{"name": "caf\xe9"}')
    assert "not UTF-8 text (byte 0xe9 at offset 13)" in _one_line_error(lambda: read_json_file(latin))
    for text in ('{"a": NaN}', '{"a": -Infinity}', '{"a": 1e999}', "[" * 200000, '{"a": ' + "9" * 5000 + "}"):
        path = tmp_path / "x.json"
        path.write_text(text)
        assert "not valid JSON" in _one_line_error(lambda p=path: read_json_file(p))
    bom = tmp_path / "bom.json"
    bom.write_bytes(b'\xef\xbb\xbf{"a": 1.5}')
    assert read_json_file(bom) == {"a": 1.5}


# --- the safe writer: only regular files are replaced ------------------------------------------------------------

def _output_error(path):
    from collsynth.core.files import OutputError

    with pytest.raises(OutputError) as info:
        write_atomic(path, "data")
    assert "\n" not in str(info.value)
    return str(info.value)


def test_writer_never_replaces_a_device_a_fifo_or_a_link_to_one(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in _output_error(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert "not a regular file" in _output_error("/dev/null")
    assert os.path.exists("/dev/null") and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    link = tmp_path / "to_null"
    link.symlink_to("/dev/null")
    assert "not a regular file" in _output_error(link)
    assert link.is_symlink()
    assert "is a directory" in _output_error(tmp_path)
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere" / "x")
    assert "symlink to a missing" in _output_error(dangling)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "fifo", "to_null"]


def test_writer_follows_a_link_to_a_regular_file(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_writer_reports_unwritable_places_in_one_line(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("keep")
    assert "(Not a directory)" in _output_error(afile / "sub" / "x.json")
    assert "(Not a directory)" in _output_error(afile / "x.json")
    assert afile.read_text() == "keep"
    assert _output_error("/proc/x.json").startswith("/proc/x.json: cannot write there")


def _pieces_then(error: BaseException):
    yield '{"sends": ['
    yield "[0, 1, 2]," * 1000
    raise error


@pytest.mark.parametrize("error", [KeyboardInterrupt(), OSError(28, "No space left on device")],
                         ids=["ctrl-c", "disk-full"])
def test_a_streamed_write_cut_short_leaves_the_old_file_and_no_temporary(tmp_path, error):
    """`write_atomic_pieces` stopped between pieces (Ctrl-C; a write error, as a full disk gives): the target keeps
    its old bytes, the temporary file is gone; an OSError is one line naming the target, anything else goes on."""
    target = tmp_path / "algo.json"
    target.write_text("old")
    expected = OutputError if isinstance(error, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as raised:
        write_atomic_pieces(target, _pieces_then(error))
    if expected is OutputError:
        assert str(raised.value) == f"{target}: cannot write there (No space left on device); choose a writable place"
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["algo.json"]


def test_a_streamed_write_replaces_the_file_only_at_its_end(tmp_path):
    target = tmp_path / "algo.json"
    target.write_text("old")
    seen = []

    def pieces():
        yield "new "
        seen.append(target.read_text())  # between pieces the old file is still whole
        yield b"bytes"

    write_atomic_pieces(target, pieces())
    assert seen == ["old"] and target.read_text() == "new bytes"
    assert [p.name for p in tmp_path.iterdir()] == ["algo.json"]
