"""Topology JSON files: our schema round trip, TACCL profiles, resolve_topology, malformed files."""

import json
import os
from pathlib import Path

import pytest

from collsynth.topologies import (
    Topology,
    TopologyError,
    builtin,
    load_topology,
    resolve_topology,
    save_topology,
)

TACCL_TOPO_DIR = Path("/work/shared/examples/taccl/topo")
TACCL_FILES = sorted(TACCL_TOPO_DIR.glob("*.json")) if TACCL_TOPO_DIR.is_dir() else []


def _taccl_importer():
    try:
        from collsynth.topologies import taccl
    except ImportError as exc:  # the MILP engineer's module may not exist yet
        pytest.skip(f"collsynth.topologies.taccl is not importable yet ({exc})")
    return taccl


@pytest.mark.parametrize("name", ["ring:5", "dgx1", "dgx2", "star:4", "2xndv2", "torus:2x3"])
def test_round_trip_keeps_everything(tmp_path, name):
    topo = builtin(name)
    path = tmp_path / "topo.json"
    save_topology(topo, path)
    back = load_topology(path)
    assert back == topo
    assert back.description == topo.description
    assert back.fingerprint() == topo.fingerprint()
    assert resolve_topology(str(path)) == topo
    assert json.loads(path.read_text())["num_ranks"] == topo.num_ranks


def test_save_is_atomic_and_leaves_no_temp_files(tmp_path):
    path = tmp_path / "t.json"
    save_topology(builtin("ring:4"), path)
    save_topology(builtin("ring:6"), path)  # overwrite
    assert load_topology(path).num_ranks == 6
    assert sorted(os.listdir(tmp_path)) == ["t.json"]
    with pytest.raises(TopologyError, match="does not exist"):
        save_topology(builtin("ring:4"), tmp_path / "missing" / "t.json")


def test_minimal_file_uses_defaults(tmp_path):
    path = tmp_path / "mini.json"
    path.write_text(json.dumps({"num_ranks": 2, "links": [{"src": 0, "dst": 1}, {"src": 1, "dst": 0}]}))
    topo = load_topology(path)
    assert topo.num_ranks == 2 and topo.bandwidth(0, 1) == 1 and topo.link_between(0, 1).kind == "nvlink"


def test_documented_example_loads(tmp_path):
    """The example in docs/formats.md is a valid topology file."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "formats.md"
    text = doc.read_text()
    start = text.index("```json", text.index("## Topology JSON")) + len("```json")
    example = text[start:text.index("```", start)]
    path = tmp_path / "example.json"
    path.write_text(example)
    topo = load_topology(path)
    assert topo.num_ranks == 4 and topo.machines == (0, 0, 1, 1) and len(topo.switches) == 2


@pytest.mark.parametrize("path", TACCL_FILES, ids=[p.name for p in TACCL_FILES])
def test_taccl_profiles_load(path):
    _taccl_importer()
    topo = load_topology(path)
    gpus = json.loads(path.read_text())["gpus_per_node"]
    assert topo.num_ranks == gpus
    assert resolve_topology(str(path)) == topo
    two = resolve_topology(f"2x{path}")
    assert two.num_ranks == 2 * gpus and two.num_machines == 2
    assert any(link.kind == "ib" for link in two.link_list)


def test_taccl_ndv2_profile_matches_our_ndv2_links():
    _taccl_importer()
    path = TACCL_TOPO_DIR / "topo-ndv2-1MB.json"
    if not path.exists():
        pytest.skip("TACCL example profiles are not present")
    taccl_topo = load_topology(path)
    ours = builtin("ndv2")
    assert {(x.src, x.dst, x.bandwidth) for x in taccl_topo.link_list} == {(x.src, x.dst, x.bandwidth)
                                                                          for x in ours.link_list}


def test_taccl_detection_by_keys(tmp_path):
    _taccl_importer()
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({"name": "hub_1MB", "gpus_per_node": 4, "alpha": 0.5, "node_betas_list": [10],
                                "node_invbws_list": [10]}))
    topo = load_topology(path)
    assert topo.num_ranks == 4 and len(topo.link_list) == 12
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"gpus_per_node": 4, "node_betas_list": [10]}))
    with pytest.raises(TopologyError, match=r"broken\.json.*alpha"):
        load_topology(broken)


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "one JSON object"),
    ('{"links": []}', "missing field 'num_ranks'"),
    ('{"num_ranks": 2}', "missing field 'links'"),
    ('{"num_ranks": 2, "links": [{"src": 0}]}', r"links\[0\]\.dst: missing"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": 5}]}', "outside"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": "one"}]}', r"links\[0\]\.dst: input should be a valid integer"),
    ('{"num_ranks": 2, "links": 7}', "links: input should be a valid list"),
    ('{"num_ranks": 4.5, "links": []}', "num_ranks: input should be a valid integer, got 4.5"),
    ('{"num_ranks": "4", "links": []}', "num_ranks: input should be a valid integer, got '4'"),
    ('{"num_ranks": 1000000000, "links": []}', "above the cap of 16384 ranks; raise it with COLLSYNTH_MAX_RANKS"),
    ('{"num_ranks": 2, "links": [{"src": 0.5, "dst": 1}]}', r"links\[0\]\.src: input should be a valid integer"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": 1, "alpha_us": NaN}]}', "not valid JSON"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": 1, "beta_us_per_mb": -1}]}', "greater than or equal to 0"),
    ('{"num_ranks": 2, "links": [], "swiches": []}', "unknown key; did you mean 'switches'"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": 1}, {"src": 0, "dst": 1}]}', "listed twice"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": 1}], "switches": [{"name": "s", "links": [[1, 0]]}]}',
     "does not have"),
    ('{"num_ranks": 2, "links": [{"src": 0, "dst": 1}], "nodes": [0]}', "'nodes' has 1 entries"),
])
def test_malformed_files_give_one_line_naming_the_file(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(TopologyError, match=message) as info:
        load_topology(path)
    text = str(info.value)
    assert text.startswith(str(path)) and "\n" not in text


def test_resolve_topology_names_paths_and_errors(tmp_path):
    assert resolve_topology("ring:4") == builtin("ring:4")
    assert resolve_topology("  2xndv2 ") == builtin("2xndv2")
    with pytest.raises(TopologyError, match="no such file"):
        resolve_topology(str(tmp_path / "missing.json"))
    with pytest.raises(TopologyError, match="no such file"):
        load_topology(tmp_path / "missing.json")
    with pytest.raises(TopologyError, match="unknown topology"):
        resolve_topology("no-such-topology")
    with pytest.raises(TopologyError, match="empty"):
        resolve_topology("  ")
    # N x our own file: composed through NICs
    path = tmp_path / "node.json"
    save_topology(builtin("ndv2"), path)
    two = resolve_topology(f"2x{path}")
    assert two.fingerprint() == builtin("2xndv2").fingerprint()


def test_to_dict_shape_is_our_schema():
    data = builtin("2xring:2").to_dict()
    assert set(data) == {"name", "num_ranks", "links", "switches", "nodes", "nics", "description"}
    assert set(data["links"][0]) == {"src", "dst", "bandwidth", "alpha_us", "beta_us_per_mb", "kind"}
    assert set(data["switches"][0]) == {"name", "links", "bandwidth", "beta_us_per_mb"}
    assert Topology.from_dict(data) == builtin("2xring:2")
