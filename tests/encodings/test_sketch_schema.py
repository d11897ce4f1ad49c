"""The declared sketch schemas (collsynth.encodings.sketch_schema): exact types, caps, unknown keys with the
closest known one, the format; every shipped TACCL sketch and every sketch we write passes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.encodings.sketch import Sketch, SketchError, load_sketch, sketch_from_taccl, taccl_to_dict

EXAMPLES = sorted((Path(__file__).resolve().parents[2].parent / "shared/examples/taccl/sketch").glob("*.json")) or \
    sorted(Path("/work/shared/examples/taccl/sketch").glob("*.json"))


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_taccl_examples_pass_and_round_trip_in_both_formats(path):
    sketch = load_sketch(path)
    assert Sketch.from_dict(sketch.to_dict()) == sketch
    assert sketch_from_taccl(taccl_to_dict(sketch)) == sketch


@pytest.mark.parametrize(("doc", "needle"), [
    ({"chunkup": "4"}, "sketch: chunkup: input should be a valid integer, got '4'"),
    ({"chunkup": 4.0}, "chunkup: input should be a valid integer"),
    ({"nodes": True}, "nodes: input should be a valid integer"),
    ({"chunkup": 10**6}, "1000000 chunks per rank is above the cap of 256 chunks per rank; raise it with "
                         "COLLSYNTH_MAX_CHUNKS_PER_RANK=N"),
    ({"nodes": 10**9}, "COLLSYNTH_MAX_RANKS"),
    ({"chunkupp": 2}, "sketch: chunkupp: unknown key; did you mean 'chunkup'?"),
    ({"format": "collsynth.sketch/2"}, "format: input should be 'collsynth.sketch/1'"),
    ({"routes": "fastest"}, "routes: input should be 'auto', 'shortest' or 'any'"),
    ({"intra_node": {"strategy": "switch", "switches": [{"ranks": [0, 1], "connection": "min"}]}},
     "intra_node.switches[0].connection: unknown key; did you mean 'connections'?"),
    ({"inter_node": {"max_together": 0}}, "inter_node.max_together"),
    ({"inter_node": {"senders_first": "yes"}}, "inter_node.senders_first"),
    ({"symmetry": [{"offset": -1, "group": 2}]}, "symmetry[0].offset"),
    ({"nnodes": 2, "hyperparameters": {"input_chunkup": 2, "chunk_up": 1}, "intranode_sketch": {}},
     "TACCL sketch: hyperparameters.chunk_up: unknown key"),
    ({"nnodes": "2", "intranode_sketch": {}}, "TACCL sketch: nnodes: input should be a valid integer"),
    ({"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [[0, 1]],
                                        "switch_hyperedge_strategy": ["uc-mid"]}}, "switch_hyperedge_strategy[0]"),
])
def test_bad_sketches_are_one_line_naming_the_field(doc, needle):
    with pytest.raises(SketchError) as info:
        Sketch.from_dict(doc)
    assert needle in str(info.value) and "\n" not in str(info.value), str(info.value)


def test_load_sketch_names_the_file(tmp_path):
    path = tmp_path / "sk.json"
    path.write_text(json.dumps({"chunkup": "2"}))
    with pytest.raises(SketchError, match=r"sk\.json: sketch: chunkup"):
        load_sketch(path)


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(["nodes", "chunkup", "routes", "name", "format", "symmetry", "intra_node"]),
       value=st.one_of(st.none(), st.booleans(), st.integers(-3, 10**7), st.floats(), st.text(max_size=5),
                       st.lists(st.integers(-1, 3), max_size=3)))
def test_a_sketch_is_either_refused_in_one_line_or_read_exactly(key, value):
    try:
        sketch = Sketch.from_dict({key: value})
    except SketchError as exc:
        assert "\n" not in str(exc)
    else:  # accepted: the value was exactly of the declared type (no coercion), so it reads back unchanged
        assert Sketch.from_dict(sketch.to_dict()) == sketch
        if key in ("nodes", "chunkup"):
            assert type(value) is int and getattr(sketch, "num_nodes" if key == "nodes" else key) == value
