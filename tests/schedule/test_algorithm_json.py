"""The streaming algorithm writer (schedule/algorithm_json.py) writes `to_json()`'s bytes, atomically."""

import json
import os

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.core.enums import Op
from collsynth.core.files import OutputError
from collsynth.schedule import Algorithm, Send, Step, algorithm_json
from collsynth.schedule.algorithm_json import _value_text, iter_algorithm_json
from collsynth.topologies import ring

N = 4
times = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-5, 10**20))
sends = st.builds(
    lambda chunk, src, dst, op, start, duration: Send(chunk, src, dst, op, start, duration),
    st.integers(0, N - 1), st.integers(0, N - 1), st.integers(0, N - 1), st.sampled_from([Op.COPY, Op.REDUCE]),
    times, st.one_of(st.none(), st.floats(0, 1e6))).map(
        lambda s: s if s.start_us is not None else Send(s.chunk, s.src, s.dst, s.op))
steps = st.builds(lambda rounds, xs: Step(rounds, tuple(xs)), st.integers(0, 3), st.lists(sends, max_size=12))
names = st.text(max_size=12)
provenance = st.dictionaries(st.text(max_size=6), st.one_of(st.integers(), st.floats(), st.text(max_size=6),
                                                            st.lists(st.integers(), max_size=3)), max_size=4)


@given(name=names, xs=st.lists(steps, max_size=6), prov=provenance, batch=st.integers(1, 5))
@settings(max_examples=300, deadline=None)
def test_streamed_text_is_to_json(name, xs, prov, batch):
    algorithm = Algorithm(name, ring(N), make_collective("allgather", N), tuple(xs), prov)
    # batches smaller than a step: the joins between batches are exercised too
    assert "".join(iter_algorithm_json(algorithm, batch)) == algorithm.to_json()
    assert "".join(iter_algorithm_json(algorithm)) == algorithm.to_json()


json_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=6)),
                           lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                   st.dictionaries(st.text(max_size=4), inner, max_size=4)),
                           max_leaves=20)


@given(value=json_values, piece_chars=st.integers(1, 40))
@settings(max_examples=300, deadline=None)
def test_a_value_streamed_in_pieces_is_its_indented_text_one_level_deep(value, piece_chars):
    # the joins between pieces fall anywhere (even inside a string with an escaped newline), and a top-level key's
    # value is the value's own indent=1 text with one more space after each newline
    pieces = list(_value_text(value, piece_chars))
    assert "".join(pieces) == json.dumps(value, indent=1).replace("\n", "\n ")
    assert all(len(piece) < piece_chars + 100 for piece in pieces[:-1])


def ring_allgather(n: int) -> Algorithm:
    steps = tuple(Step(1, tuple(Send((r - t) % n, r, (r + 1) % n, Op.COPY, t * 2.5, 2.5) for r in range(n)))
                  for t in range(n - 1))
    return Algorithm(f"ring-ag-{n}", ring(n), make_collective("allgather", n), steps, {"synthesizer": "test"})


def test_write_json_writes_the_same_bytes_as_to_json(tmp_path):
    algorithm = ring_allgather(5)
    path = algorithm.write_json(tmp_path / "a.json")
    assert path.read_bytes() == algorithm.to_json().encode()
    assert Algorithm.load(path) == algorithm


def test_write_json_refuses_special_files_in_one_line(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "to_null"
    link.symlink_to("/dev/null")
    for target in (fifo, "/dev/null", link):
        with pytest.raises(OutputError, match="not a regular file") as info:
            ring_allgather(3).write_json(target)
        assert "\n" not in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "to_null"]


def test_an_interrupted_write_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "a.json"
    target.write_text("old")
    real = algorithm_json._sends_text

    def interrupted(step_sends, batch):
        yield from real(step_sends, batch)
        raise KeyboardInterrupt

    monkeypatch.setattr(algorithm_json, "_sends_text", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ring_allgather(4).write_json(target)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


@pytest.mark.parametrize("target", ["/dev/null", "fifo"])
def test_cli_output_to_a_special_file_is_exit_2(tmp_path, target):
    from collsynth.cli import main

    if target == "fifo":
        target = str(tmp_path / "fifo")
        os.mkfifo(target)
    result = CliRunner().invoke(main, ["synth", "greedy", "ring:4", "alltoall", "-o", target])
    assert result.exit_code == 2, result.output
    assert "not a regular file" in result.output
    assert "Traceback" not in result.output
