"""sim and export refuse what the interpreter refuses (one line, exit 2) and accept what it runs."""

from __future__ import annotations

import re

import pytest

from collsynth.cli import main


def _mutated(source, tmp_path, old, new):
    text = source.read_text()
    assert old in text
    path = tmp_path / "bad.xml"
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize(("old", "new", "message"), [
    ('nchunksperloop="8"', 'nchunksperloop="16"', "reference interpreter refuses this IR"),
    ('nchunksperloop="8"', 'nchunksperloop="1000000000"', "above the cap"),
    ('i_chunks="2"', 'i_chunks="1000000000"', "above the cap of 65536 chunks; raise it with COLLSYNTH_MAX_CHUNKS"),
    ('type="s" ', 'type="cpy" ', r"reference interpreter refuses this IR \(deadlock\)"),
])
def test_sim_and_export_refuse_what_the_interpreter_refuses(cli_runner, ring_allgather_xml, tmp_path, old, new,
                                                            message):
    bad = _mutated(ring_allgather_xml, tmp_path, old, new)
    for args in (["sim", str(bad), "-t", "ring:4", "-s", "1MB"], ["export", "chakra", str(bad), "-o",
                                                                  str(tmp_path / "et")]):
        result = cli_runner.invoke(main, args)
        assert result.exit_code == 2, (args, result.output)
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1, result.stderr
        assert re.search(message, lines[0]), lines[0]
        assert not (tmp_path / "et").exists()


def test_sim_and_export_accept_a_runnable_ir(cli_runner, ring_allgather_xml, tmp_path):
    result = cli_runner.invoke(main, ["sim", str(ring_allgather_xml), "-t", "ring:4", "-s", "1MB"])
    assert result.exit_code == 0, result.output
    assert "busbw" in result.stdout
    result = cli_runner.invoke(main, ["export", "chakra", str(ring_allgather_xml), "-o", str(tmp_path / "et")])
    assert result.exit_code == 0, result.output
    assert len(list((tmp_path / "et").glob("*.et"))) == 4
