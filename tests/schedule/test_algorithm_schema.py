"""Algorithm files are validated against the declared schema: exact types, format version, caps, ranges."""

import copy
import json

import pytest

from collsynth.collectives import make_collective
from collsynth.core.errors import CollsynthError
from collsynth.schedule import Algorithm
from collsynth.schedule.algorithm import AlgorithmError, Send, Step
from collsynth.topologies import ring


def _document():
    algo = Algorithm("a", ring(3), make_collective("allgather", 3),
                     (Step(1, (Send(0, 0, 1), Send(1, 1, 2), Send(2, 2, 0))),
                      Step(1, (Send(0, 1, 2), Send(1, 2, 0), Send(2, 0, 1)))))
    return algo.to_dict()


def test_round_trip():
    doc = _document()
    assert Algorithm.from_dict(doc).to_dict() == doc


@pytest.mark.parametrize(("path", "value", "message"), [
    (("format",), "collsynth.algorithm/2", "format: 'collsynth.algorithm/2' is not a format this collsynth reads"),
    (("steps", 0, "sends", 0), ["x", 0, 1, "copy"], r"steps\[0\]\.sends\[0\]\.chunk: input should be a valid integer"),
    (("steps", 0, "sends", 0), [0, 0.5, 1, "copy"], r"sends\[0\]\.src: input should be a valid integer"),
    (("steps", 0, "sends", 0), [0, 0, 1, "move"], r"sends\[0\]\.op: input should be 'copy' or 'reduce'"),
    (("steps", 0, "sends", 0), [0, 0, 1, "copy", -1.0, 2.0], "start_us: input should be greater than or equal"),
    (("steps", 0, "sends", 0), [0, 0, 7, "copy"], "outside the 3 chunks / 3 ranks"),
    (("steps", 0, "sends", 0), [0, 0], "a send is"),
    (("steps", 0, "rounds"), "1", r"steps\[0\]\.rounds: input should be a valid integer"),
    (("steps", 0, "round"), 1, "unknown key; did you mean 'rounds'"),
    (("topology", "num_ranks"), 4.5, r"topology: num_ranks: input should be a valid integer, got 4\.5"),
    (("collective", "chunks"), 0, "collective: chunks: input should be greater than or equal to 1"),
])
def test_bad_documents_are_one_line_errors(path, value, message):
    doc = copy.deepcopy(_document())
    holder = doc
    for key in path[:-1]:
        holder = holder[key]
    holder[path[-1]] = value
    with pytest.raises(AlgorithmError if path[0] in ("format", "steps") else CollsynthError, match=message) as info:
        Algorithm.from_dict(doc)
    assert "\n" not in str(info.value)


def test_steps_cap_names_its_variable(monkeypatch):
    doc = _document()
    monkeypatch.setenv("COLLSYNTH_MAX_STEPS", "1")
    with pytest.raises(AlgorithmError, match="steps: 2 steps is above the cap of 1 steps; raise it with "
                                             "COLLSYNTH_MAX_STEPS"):
        Algorithm.from_dict(doc)


def test_load_names_the_file(tmp_path):
    path = tmp_path / "a.json"
    doc = _document()
    doc["steps"][0]["sends"][0][0] = "x"
    path.write_text(json.dumps(doc))
    with pytest.raises(AlgorithmError, match=r"^.*a\.json: steps\[0\]\.sends\[0\]\.chunk"):
        Algorithm.load(path)
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(AlgorithmError, match="not UTF-8"):
        Algorithm.load(path)
