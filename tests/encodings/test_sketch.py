"""Communication sketches: TACCL's JSON, our format, conversion, and checks against a topology."""

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.encodings.milp_instance import build_instance
from collsynth.encodings.sketch import (
    Sketch,
    SketchError,
    SwitchSketch,
    load_sketch,
    sketch_from_taccl,
    taccl_to_dict,
)
from collsynth.topologies import Link, Topology, fully_connected
from collsynth.topologies.taccl import load_taccl_profile

NDV2 = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
        "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
DGX2 = {"name": "DGX2_1MB", "gpus_per_node": 16, "nics_per_node": 8, "alpha": 0.3, "node_betas_list": [8],
        "node_invbws_list": [8], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
# TACCL-format sketches like those of microsoft/taccl's examples
SK_DGX2_N2 = {
    "nnodes": 2,
    "intranode_sketch": {"strategy": "switch", "switches": [list(range(16))], "switch_hyperedge_strategy": ["uc-min"]},
    "internode_sketch": {"strategy": "relay", "internode_conn": {str(2 * i + 1): [2 * i] for i in range(8)},
                         "gpus_to_sender_rev_map": {str(2 * i + 1): [2 * i, 2 * i + 1] for i in range(8)},
                         "enforce_ordering": True},
    "symmetry_offsets": [[2, 16], [16, 32]],
    "hyperparameters": {"input_chunkup": 2},
}
SK_NDV2_N2 = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
              "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
              "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}
SHARED = Path(__file__).resolve().parents[3] / "shared" / "examples" / "taccl" / "sketch"


def test_taccl_sketch_fields_are_read():
    sk = sketch_from_taccl(SK_DGX2_N2)
    assert sk.num_nodes == 2 and sk.chunkup == 2
    assert sk.intra_strategy == "switch" and sk.switches == (SwitchSketch(tuple(range(16)), "min"),)
    assert sk.inter_strategy == "relay" and (1, 0) in sk.connections
    assert sk.senders_of(0) == (1,) and sk.senders_of(3) == (3,)
    assert sk.senders_first
    assert sk.symmetry == ((2, 16), (16, 32))
    assert sk.route_policy == "any"


def test_named_connection_strategies():
    for conn, first, count in (("direct-map", (3, 3), 8), ("fully-connected", (0, 5), 64)):
        sk = sketch_from_taccl({**SK_NDV2_N2, "internode_sketch": {"strategy": "relay", "internode_conn": conn}})
        pairs = sk.connection_pairs(8)
        assert first in pairs and len(pairs) == count


def test_round_trips_through_both_formats():
    for data in (SK_DGX2_N2, SK_NDV2_N2):
        sk = sketch_from_taccl(data)
        assert Sketch.from_dict(sk.to_dict()) == sk
        assert sketch_from_taccl(taccl_to_dict(sk)) == sk
        assert Sketch.from_dict(json.loads(json.dumps(sk.to_dict()))) == sk


def test_load_sketch_reads_both_formats(tmp_path):
    (tmp_path / "t.json").write_text(json.dumps(SK_NDV2_N2))
    (tmp_path / "o.json").write_text(json.dumps(sketch_from_taccl(SK_NDV2_N2).to_dict()))
    a, b = load_sketch(tmp_path / "t.json"), load_sketch(tmp_path / "o.json")
    assert a == b and a.name == "t"


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared TACCL examples not checked out")
def test_every_shared_example_sketch_loads():
    for path in sorted(SHARED.glob("*.json")):
        sk = load_sketch(path)
        assert sketch_from_taccl(taccl_to_dict(sk)) == sk


@pytest.mark.parametrize("data, field", [
    ({**SK_NDV2_N2, "intranode_sketch": {"strategy": "ring"}}, "intranode_sketch.strategy"),
    ({**SK_NDV2_N2, "internode_sketch": {"strategy": "relay", "internode_conn": "some"}},
     "internode_sketch.internode_conn"),
    ({**SK_NDV2_N2, "internode_sketch": {"strategy": "tree"}}, "internode_sketch.strategy"),
    ({**SK_NDV2_N2, "hyperparameters": {"input_chunkup": 0}}, "chunkup"),
    ({**SK_NDV2_N2, "symmetry_offsets": [[8]]}, "symmetry_offsets"),
    ({**SK_NDV2_N2, "colour": "red"}, "colour"),
    ({**SK_DGX2_N2, "intranode_sketch": {"strategy": "switch", "switches": [[0, 1]],
                                         "switch_hyperedge_strategy": ["uc-mid"]}}, "switch_hyperedge_strategy"),
])
def test_malformed_sketches_name_the_field(data, field):
    with pytest.raises(SketchError, match=field.replace(".", r"\.")):
        sketch_from_taccl(data)


def test_our_format_rejects_unknown_values():
    good = sketch_from_taccl(SK_NDV2_N2).to_dict()
    with pytest.raises(SketchError, match="routes"):
        Sketch.from_dict({**good, "routes": "scenic"})
    with pytest.raises(SketchError, match="inter_node.connections"):
        Sketch.from_dict({**good, "inter_node": {"connections": "some"}})


def test_check_against_the_topology():
    two_nodes = load_taccl_profile(NDV2, name="ndv2", num_nodes=2)
    sk = sketch_from_taccl(SK_NDV2_N2)
    assert sk.check(two_nodes) == 8
    one_node = load_taccl_profile(NDV2, name="ndv2")
    with pytest.raises(SketchError, match="'nodes'"):
        sk.check(one_node)
    bad_conn = {"strategy": "relay", "internode_conn": {"9": [1]}}
    bad_rank = sketch_from_taccl({**SK_NDV2_N2, "internode_sketch": bad_conn})
    with pytest.raises(SketchError, match="outside 0..7"):
        bad_rank.check(two_nodes)
    no_link = Sketch(intra_strategy="switch", switches=(SwitchSketch((0, 5), "min"),))
    with pytest.raises(SketchError, match="no link 0->5"):
        no_link.check(one_node)


def test_uncovered_senders_are_rejected():
    data = json.loads(json.dumps(SK_DGX2_N2))
    del data["internode_sketch"]["gpus_to_sender_rev_map"]["15"]
    topo = load_taccl_profile(DGX2, name="dgx2", num_nodes=2)
    with pytest.raises(SketchError, match=r"GPUs \[14, 15\] have no sender"):
        sketch_from_taccl(data).check(topo)


def test_a_sketch_that_makes_the_collective_impossible():
    # every GPU must have a sender to leave its node
    topo = load_taccl_profile(NDV2, name="ndv2", num_nodes=2)
    sk = Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 1),), senders=((0, (0, 1, 2, 4, 5, 6, 7)),))
    with pytest.raises(SketchError, match=r"GPUs \[3\] have no sender"):
        build_instance(topo, make_collective("allgather", 16), sk, 1 << 20)
    # a one-way link: rank 1's chunk can never reach rank 0
    one_way = Topology("one_way", 2, (Link(0, 1),))
    with pytest.raises(SketchError, match="chunk 1 .*cannot reach rank 0"):
        build_instance(one_way, make_collective("allgather", 2), Sketch(), 1 << 20)


def test_symmetry_must_be_a_symmetry():
    topo = load_taccl_profile(NDV2, name="ndv2")
    with pytest.raises(SketchError, match="not a symmetry of the topology"):
        build_instance(topo, make_collective("allgather", 8), Sketch(symmetry=((1, 8),)), 1 << 20)
    # rotating a fully connected topology is a symmetry
    inst = build_instance(fully_connected(4), make_collective("allgather", 4), Sketch(symmetry=((1, 4),)), 1 << 20)
    assert inst.symmetry.order == 4


_switch = st.builds(lambda ranks, pol: {"ranks": ranks, "connections": pol},
                    st.lists(st.integers(0, 7), min_size=2, max_size=8, unique=True),
                    st.sampled_from(["min", "max", "any"]))


@given(nodes=st.integers(1, 4), chunkup=st.integers(1, 6), switches=st.lists(_switch, max_size=2),
       conns=st.one_of(st.sampled_from(["direct", "all"]),
                       st.lists(st.tuples(st.integers(0, 7), st.integers(0, 7)), min_size=1, max_size=4)),
       first=st.booleans(), together=st.integers(1, 8),
       symmetry=st.lists(st.tuples(st.integers(0, 7), st.sampled_from([8, 16])), max_size=2),
       routes=st.sampled_from(["auto", "shortest", "any"]))
def test_our_format_round_trips(nodes, chunkup, switches, conns, first, together, symmetry, routes):
    data = {"nodes": nodes, "chunkup": chunkup, "routes": routes,
            "intra_node": {"strategy": "switch" if switches else "free", "switches": switches},
            "symmetry": [{"offset": o, "group": g} for o, g in symmetry]}
    if nodes > 1:
        data["inter_node"] = {"strategy": "relay", "connections": conns if isinstance(conns, str) else
                              [list(p) for p in conns], "max_together": together}
        if first:
            data["inter_node"]["senders"] = {"0": list(range(8))}
            data["inter_node"]["senders_first"] = True
    sk = Sketch.from_dict(data)
    assert Sketch.from_dict(sk.to_dict()) == sk
    converted = sketch_from_taccl(taccl_to_dict(sk))
    assert (converted.num_nodes, converted.chunkup, converted.switches, converted.symmetry) == \
        (sk.num_nodes, sk.chunkup, sk.switches if all(s.connections != "any" for s in sk.switches) else
         converted.switches, sk.symmetry)
