"""The JSON examples in docs/formats.md load and mean what the text says."""

import json
import re
from pathlib import Path

from collsynth.collectives import Collective, alltonext, make_collective
from collsynth.schedule import Algorithm, verify

DOC = Path(__file__).resolve().parents[2] / "docs" / "formats.md"


def json_blocks(section: str) -> list[dict]:
    text = DOC.read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end >= 0 else None]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", body, flags=re.DOTALL)]


def test_collective_examples():
    short, a2n = json_blocks("Collective JSON")
    assert Collective.from_dict(short) == make_collective("allgather", 8, 2)
    assert a2n == alltonext(4).to_dict()
    assert Collective.from_dict(a2n) == alltonext(4)


def test_algorithm_example_verifies():
    (data,) = json_blocks("Algorithm JSON")
    algo = Algorithm.from_dict(data)
    verify(algo)
    assert (algo.num_steps, algo.rounds) == (2, 2)

