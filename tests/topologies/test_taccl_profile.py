"""TACCL topology profile import (collsynth/topologies/taccl.py)."""

import json
from pathlib import Path

import pytest

from collsynth.topologies import TopologyError
from collsynth.topologies.library import DGX1_NVLINKS
from collsynth.topologies.taccl import (
    is_taccl_profile,
    load_taccl_profile,
    profile_chunk_bytes,
    profile_cost_scale,
)

# TACCL's example profiles (measured costs; the same numbers as ../shared/examples/taccl/topo).
PROFILES = {
    "ndv2-1MB": {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3,
                 "node_betas_list": [23, 46], "node_invbws_list": [23, 46], "remote_invbw": 107,
                 "remote_alpha": 2.6, "remote_beta": 105},
    "ndv2-1KB": {"name": "NDv2_1KB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 30,
                 "node_betas_list": [2.24, 4.50], "node_invbws_list": [32.25, 34.50], "remote_alpha": 260,
                 "remote_beta": 10.25, "remote_invbw": 270.25},
    "ndv2-32KB": {"name": "NDv2_32KB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 3,
                  "node_betas_list": [7.18, 14.38], "node_invbws_list": [10.18, 17.38], "remote_alpha": 26,
                  "remote_beta": 32.8, "remote_invbw": 59},
    "dgx2-1MB": {"name": "DGX2_1MB", "gpus_per_node": 16, "nics_per_node": 8, "alpha": 0.3,
                 "node_betas_list": [8], "node_invbws_list": [8], "remote_invbw": 107, "remote_alpha": 2.6,
                 "remote_beta": 105},
    "dgx2-1KB": {"name": "DGX2_1KB", "gpus_per_node": 16, "nics_per_node": 8, "alpha": 30,
                 "node_betas_list": [1], "node_invbws_list": [31], "remote_invbw": 270, "remote_alpha": 260,
                 "remote_beta": 10.25},
}
SHARED = Path(__file__).resolve().parents[3] / "shared" / "examples" / "taccl" / "topo"


def _profile(name: str) -> dict:
    return json.loads(json.dumps(PROFILES[name]))


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared TACCL examples not checked out")
def test_every_shared_example_profile_loads():
    for path in sorted(SHARED.glob("*.json")):
        data = json.loads(path.read_text())
        assert is_taccl_profile(data)
        for nodes in (1, 2):
            topo = load_taccl_profile(data, name=path.stem, num_nodes=nodes)
            assert topo.num_ranks == nodes * data["gpus_per_node"]


def test_ndv2_1mb_link_classes_follow_the_dgx1_mesh():
    topo = load_taccl_profile(_profile("ndv2-1MB"), name="ndv2")
    assert topo.num_ranks == 8 and topo.machines is None and len(topo.link_list) == 32
    for link in topo.link_list:
        double = DGX1_NVLINKS[link.src][link.dst] == 2
        assert link.beta_us_per_mb == (23.0 if double else 46.0)
        assert link.alpha_us == pytest.approx(0.3)
        assert link.bandwidth == DGX1_NVLINKS[link.src][link.dst]
        assert link.kind == "nvlink"


def test_scaled_profiles_give_the_same_physical_costs():
    # the 1KB profile is x100, the 32KB one x10: per-MB costs match the 1MB profile within rounding
    one_mb = load_taccl_profile(_profile("ndv2-1MB"), name="a").link_between(0, 1)
    for name in ("ndv2-1KB", "ndv2-32KB"):
        link = load_taccl_profile(_profile(name), name="b").link_between(0, 1)
        assert link.alpha_us == pytest.approx(one_mb.alpha_us)
        assert link.beta_us_per_mb == pytest.approx(one_mb.beta_us_per_mb, rel=0.01)
    assert profile_cost_scale(_profile("ndv2-1KB")) == 100
    assert profile_cost_scale(_profile("ndv2-32KB")) == 10
    assert profile_chunk_bytes(_profile("ndv2-32KB")) == 32 * 1024


def test_two_nodes_add_ib_links_and_a_shared_nic():
    topo = load_taccl_profile(_profile("ndv2-1MB"), name="ndv2", num_nodes=2)
    assert topo.num_ranks == 16 and topo.num_machines == 2
    ib = [link for link in topo.link_list if link.kind == "ib"]
    assert len(ib) == 2 * 8 * 8
    ib_link = topo.link_between(0, 9)
    assert ib_link.alpha_us == pytest.approx(2.6) and ib_link.beta_us_per_mb == pytest.approx(105)
    assert topo.nics == (tuple(range(8)), tuple(range(8, 16)))
    nic_out = next(s for s in topo.switches if s.name == "nic_out_0_0")
    assert len(nic_out.links) == 64 and all(a < 8 <= b for a, b in nic_out.links)


def test_dgx2_has_nvswitch_ports_and_two_gpus_per_nic():
    topo = load_taccl_profile(_profile("dgx2-1MB"), name="dgx2", num_nodes=2)
    assert topo.num_ranks == 32
    ports = [s for s in topo.switches if s.name.startswith("nvswitch_")]
    assert len(ports) == 2 * 2 * 16
    assert topo.nics[:2] == ((0, 1), (2, 3))


def test_taccl_costs_charge_invbw():
    topo = load_taccl_profile(_profile("ndv2-1KB"), name="x", taccl_costs=True)
    fast = topo.link_between(0, 1)
    assert fast.alpha_us == 0.0
    assert fast.cost_us(1 / 1024) == pytest.approx(0.3225)


def test_custom_matrices_are_indexed_dst_src():
    data = {"name": "tiny_1MB", "gpus_per_node": 3, "alpha": 0.5,
            "links": [[0, 1, 0], [0, 0, 0], [1, 0, 0]],  # links[dst][src]: 1 -> 0 and 0 -> 2
            "betas": [[0, 10, 0], [0, 0, 0], [20, 0, 0]],
            "invbws": [[0, 10, 0], [0, 0, 0], [20, 0, 0]]}
    topo = load_taccl_profile(data, name="tiny")
    assert {(link.src, link.dst) for link in topo.link_list} == {(1, 0), (0, 2)}
    assert topo.link_between(1, 0).beta_us_per_mb == 10 and topo.link_between(0, 2).beta_us_per_mb == 20


def test_profile_detection():
    assert is_taccl_profile(_profile("dgx2-1KB"))
    assert not is_taccl_profile({"num_ranks": 2, "links": []})


@pytest.mark.parametrize("change, words", [
    ({"alpha": "fast"}, "alpha: input should be a valid number"),
    ({"alpha": -1}, "alpha: input should be greater than or equal to 0"),
    ({"gpus_per_node": 8.5}, "gpus_per_node: input should be a valid integer"),
    ({"remote_betta": 1}, "remote_betta: unknown key; did you mean 'remote_beta'"),
    ({"nnodes": 10**9}, "above the cap"),
    ({"node_betas_list": [23]}, "NDv2 profile needs"),
    ({"nics_per_node": 3}, "must divide"),
    ({"gpus_per_node": 0}, "gpus_per_node"),
    ({"name": "NDv2", "chunk_bytes": -1}, "chunk_bytes"),
])
def test_bad_profiles_name_the_field(change, words):
    data = dict(_profile("ndv2-1MB"))
    data.update(change)
    with pytest.raises(TopologyError, match=words):
        load_taccl_profile(data, name="bad", num_nodes=2)


def test_unknown_chunk_size_asks_for_chunk_bytes():
    data = dict(_profile("ndv2-1MB"))
    data["name"] = "NDv2"
    with pytest.raises(TopologyError, match="chunk_bytes"):
        load_taccl_profile(data, name="ndv2")
    data["chunk_bytes"] = 1 << 20
    assert load_taccl_profile(data, name="ndv2").link_between(0, 1).beta_us_per_mb == 23.0
