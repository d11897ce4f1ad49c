"""The IR's "collective" meta text (lowering.collective_json) is exactly `json.dumps(collective.to_dict())`."""

import json

import pytest

from collsynth.collectives import custom_collective, make_collective
from collsynth.compiler.lowering import collective_json, instance_collective


@pytest.mark.parametrize("collective", [
    make_collective("allgather", 4), make_collective("alltoall", 3, 2), make_collective("broadcast", 4, root=2),
    make_collective("allreduce", 4, inplace=True), make_collective("reducescatter", 8, 3),
    instance_collective(make_collective("gather", 4, root=1), 3),
    custom_collective("shift", 3, [(0, 0, 0), (1, 1, 0), (2, 2, 0)], [(0, 1, 0), (1, 2, 0), (2, 0, 0)]),
    instance_collective(custom_collective("shift", 2, [(0, 0, 0), (1, 1, 0)], [(0, 1, 0), (1, 0, 0)]), 2),
])
def test_the_meta_text_is_the_json_of_to_dict(collective):
    assert collective_json(collective) == json.dumps(collective.to_dict(), separators=(",", ":"))
