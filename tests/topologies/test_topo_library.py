"""Built-in topologies: every one builds, with the structure its hardware has."""

import math
import re
from collections import Counter

import pytest

from collsynth.core.errors import CollsynthError
from collsynth.topologies import (
    BUILTIN_TOPOLOGIES,
    BUILTINS,
    Topology,
    TopologyError,
    builtin,
    multi_node,
    nvlink_only,
    ring,
    star,
)
from collsynth.topologies.library import IB_EDR, IB_HDR, IB_NDR, parse_nvidia_smi_topo

# (name, ranks, directed links) for every built-in; counts derived by hand from the hardware.
EXPECTED = [
    ("fattree:4", 8, 56),
    ("ring:8", 8, 16),
    ("line:5", 5, 8),
    ("fully_connected:6", 6, 30),
    ("star:5", 5, 8),
    ("hub_and_spoke:4", 4, 12),
    ("mesh2d:3x4", 12, 2 * (3 * 3 + 2 * 4)),
    ("torus:4x4x4", 64, 64 * 6),
    ("torus:3x5", 15, 15 * 4),
    ("hypercube:4", 16, 16 * 4),
    ("dgx1", 8, 32),
    ("ndv2", 8, 32),
    ("dgx2", 16, 16 * 15),
    ("ndv4", 8, 56),
    ("dgx_a100", 8, 56),
    ("h100_nvswitch", 8, 56),
    ("amd4", 4, 8),
    ("amd8", 8, 56),
    ("2xndv2", 16, 2 * 32 + 16 * 8),
    ("4xdgx2", 64, 4 * 240 + 64 * 48),
    ("2xring:4", 8, 2 * 8 + 8 * 4),
]

SINGLE_NODE_NAMES = [name for name, _, _ in EXPECTED if not re.match(r"\d+x", name)]


def undirected_symmetric(topo: Topology) -> bool:
    return all(topo.link_between(x.dst, x.src)
               == type(x)(x.dst, x.src, x.bandwidth, x.alpha_us, x.beta_us_per_mb, x.kind) for x in topo.link_list)


@pytest.mark.parametrize(("name", "ranks", "links"), EXPECTED)
def test_every_builtin_builds_with_expected_size(name, ranks, links):
    topo = builtin(name)
    assert topo.num_ranks == ranks
    assert len(topo.link_list) == links
    assert undirected_symmetric(topo), f"{name} should have the same link both ways"
    # every rank can reach every other rank
    assert all(d < math.inf for row in topo.distances for d in row)


def test_registry_covers_every_builtin_and_legacy_mapping():
    tested = {BUILTIN_TOPOLOGIES.get(name.split(":")[0]) for name in SINGLE_NODE_NAMES}
    assert set(BUILTIN_TOPOLOGIES.values()) <= tested
    for spec in BUILTIN_TOPOLOGIES.values():
        topo = builtin(spec.example)
        assert topo.num_ranks > 1
        build, nparams = BUILTINS[spec.name]
        assert build is spec.build and nparams == max(spec.arities)
    assert BUILTINS["dgx_a100"][0] is BUILTIN_TOPOLOGIES["ndv4"].build


def test_dgx1_has_six_nvlinks_per_gpu_and_the_cube_mesh():
    topo = builtin("dgx1")
    out = Counter()
    for link in topo.link_list:
        out[link.src] += link.bandwidth
    assert all(out[g] == 6 for g in range(8))
    assert sorted(topo.out_neighbors[0]) == [1, 2, 3, 4]
    doubles = {(x.src, x.dst) for x in topo.link_list if x.bandwidth == 2 and x.src < x.dst}
    assert doubles == {(0, 1), (0, 4), (1, 3), (2, 3), (2, 6), (4, 5), (5, 7), (6, 7)}
    # two parallel NVLinks move a chunk twice as fast under the alpha-beta model
    assert topo.link_between(0, 1).beta_us_per_mb == pytest.approx(topo.link_between(0, 2).beta_us_per_mb / 2)


def test_ndv2_is_dgx1_links_plus_one_nic():
    ndv2, dgx1 = builtin("ndv2"), builtin("dgx1")
    assert ndv2.link_list == dgx1.link_list
    assert ndv2.nics == (tuple(range(8)),)


@pytest.mark.parametrize(("name", "ranks"), [("dgx2", 16), ("ndv4", 8), ("h100_nvswitch", 8), ("hub_and_spoke:5", 5)])
def test_nvswitch_nodes_have_port_budgets(name, ranks):
    topo = builtin(name)
    assert len(topo.switches) == 2 * ranks
    for r in range(ranks):
        others = [o for o in range(ranks) if o != r]
        out = frozenset((r, o) for o in others)
        inn = frozenset((o, r) for o in others)
        assert sum(1 for s in topo.switches if s.links == out and s.bandwidth == 1) == 1
        assert sum(1 for s in topo.switches if s.links == inn and s.bandwidth == 1) == 1
    # every link is a single chunk per round: an SMT instance where only the port budgets bind
    assert {x.bandwidth for x in topo.link_list} == {1}


def test_newer_machines_are_faster():
    beta = {name: builtin(name).link_between(0, 1).beta_us_per_mb for name in ("dgx2", "ndv4", "h100_nvswitch")}
    alpha = {name: builtin(name).link_between(0, 1).alpha_us for name in ("dgx2", "ndv4", "h100_nvswitch")}
    assert beta["dgx2"] > beta["ndv4"] > beta["h100_nvswitch"]
    assert alpha["dgx2"] >= alpha["ndv4"] > alpha["h100_nvswitch"]
    assert IB_EDR.beta_us_per_mb > IB_HDR.beta_us_per_mb > IB_NDR.beta_us_per_mb
    # NVLink inside a node is faster than the NIC between nodes
    assert builtin("dgx1").link_between(0, 2).beta_us_per_mb < IB_EDR.beta_us_per_mb


def test_nics_per_machine():
    assert builtin("dgx2").nics == tuple((g, g + 1) for g in range(0, 16, 2))
    assert builtin("ndv4").nics == tuple((g,) for g in range(8))
    assert builtin("h100_nvswitch").nics == tuple((g,) for g in range(8))


def test_star_hub_is_rank_zero_and_blocking_variant():
    topo = builtin("star:6")
    assert topo.out_neighbors[0] == (1, 2, 3, 4, 5)
    assert all(topo.out_neighbors[leaf] == (0,) for leaf in range(1, 6))
    blocking = star(6, non_blocking=False)
    assert {s.name for s in blocking.switches} == {"hub_out", "hub_in"}
    assert blocking.fingerprint() != topo.fingerprint()


def test_shapes_have_the_right_degrees():
    mesh = builtin("mesh2d:3x4")
    degrees = Counter(len(nbrs) for nbrs in mesh.out_neighbors)
    assert degrees == Counter({2: 4, 3: 6, 4: 2})  # corners, edges, interior
    torus3 = builtin("torus:4x4x4")
    assert {len(n) for n in torus3.out_neighbors} == {6}
    assert torus3.has_link(0, 3) and torus3.has_link(0, 12) and torus3.has_link(0, 48)  # wrap-around
    torus2 = builtin("torus:2x3")  # a dimension of 2: one link per pair
    assert {len(n) for n in torus2.out_neighbors} == {3}
    cube = builtin("hypercube:5")
    assert cube.num_ranks == 32
    assert all(bin(x.src ^ x.dst).count("1") == 1 for x in cube.link_list)
    assert max(max(row) for row in cube.distances) == 5


def test_amd_layouts():
    amd4 = builtin("amd4")
    assert {len(n) for n in amd4.out_neighbors} == {2}
    assert not amd4.has_link(0, 3) and amd4.has_link(0, 1) and amd4.has_link(0, 2)
    amd8 = builtin("amd8")
    assert {x.kind for x in amd8.link_list} == {"xgmi"}
    assert {len(n) for n in amd8.out_neighbors} == {7}


def test_multi_node_composition():
    topo = builtin("2xndv2")
    assert topo.machines == (0,) * 8 + (1,) * 8
    assert topo.num_machines == 2
    assert topo.nics == (tuple(range(8)), tuple(range(8, 16)))
    ib = [x for x in topo.link_list if x.kind == "ib"]
    assert all(topo.node_of(x.src) != topo.node_of(x.dst) for x in ib)
    assert {(x.alpha_us, x.beta_us_per_mb) for x in ib} == {(IB_EDR.alpha_us, IB_EDR.beta_us_per_mb)}
    # the one NIC per node is a budget per direction over all of its GPUs' inter-node links
    nic_switches = [s for s in topo.switches if "nic" in s.name]
    assert len(nic_switches) == 4
    for s in nic_switches:
        assert len(s.links) == 64 and s.bandwidth == 1
    covered = set().union(*(s.links for s in nic_switches))
    assert covered == {(x.src, x.dst) for x in ib}
    # intra-node links are the node's, shifted
    assert topo.link_between(8, 9).bandwidth == 2 and topo.link_between(8, 9).kind == "nvlink"


def test_multi_node_nic_sharing_and_network_class():
    dgx2s = builtin("2xdgx2")
    nics = [s for s in dgx2s.switches if ".nic" in s.name and s.name.endswith("_out")]
    assert len(nics) == 16
    assert all(len(s.links) == 2 * 16 for s in nics)  # two GPUs, 16 remote GPUs each
    ndv4s = builtin("2xndv4")
    assert {x.beta_us_per_mb for x in ndv4s.link_list if x.kind == "ib"} == {IB_HDR.beta_us_per_mb}
    # a node with no NIC information gets one NIC per GPU
    rings = builtin("2xring:4")
    assert rings.nics == tuple((r,) for r in range(8))
    # node switches are kept, renamed per node
    assert sum(1 for s in dgx2s.switches if "port" in s.name) == 64


def test_multi_node_rejects_nested_and_bad_counts():
    with pytest.raises(TopologyError, match="already spans"):
        multi_node(builtin("2xndv2"), 2)
    with pytest.raises(TopologyError, match=">= 1"):
        multi_node(ring(4), 0)
    with pytest.raises(TopologyError, match="unknown topology"):
        builtin("2x2xndv2")


@pytest.mark.parametrize("name", ["RING:8", "Ring:8", " ring:8 ", "ring: 8"])
def test_names_are_forgiving_about_case_and_space(name):
    assert builtin(name) == builtin("ring:8")


@pytest.mark.parametrize(("alias", "canonical"), [
    ("Fully-Connected:4", "fully_connected:4"), ("FullyConnected:4", "fully_connected:4"),
    ("DGX-A100", "ndv4"), ("dgx_a100", "ndv4"), ("H100-NVSwitch", "h100_nvswitch"),
    ("HubAndSpoke:3", "hub_and_spoke:3"),
    ("hub-and-spoke:3", "hub_and_spoke:3"), ("DGX1", "dgx1"), ("MESH2D:2X3", "mesh2d:2x3"), ("2 x NDv2", "2xndv2"),
    ("torus:4,4,4", "torus:4x4x4"),
])
def test_aliases_and_spellings(alias, canonical):
    assert builtin(alias) == builtin(canonical)


def test_fingerprints_are_stable_and_distinct():
    names = [name for name, _, _ in EXPECTED if name != "dgx_a100"]
    prints = {name: builtin(name).fingerprint() for name in names}
    assert len(set(prints.values())) == len(names), "distinct topologies must have distinct fingerprints"
    assert all(builtin(name).fingerprint() == fp for name, fp in prints.items())
    assert builtin("dgx_a100").fingerprint() == prints["ndv4"]
    # the name and description do not matter, the structure does
    same = Topology.from_dict({**builtin("ring:4").to_dict(), "name": "other", "description": "x"})
    assert same.fingerprint() == builtin("ring:4").fingerprint()
    # Golden value: the catalog indexes algorithms by it. If this changes, every stored entry is orphaned.
    assert builtin("ring:4").fingerprint() == "9db3d9288a35542d"


@pytest.mark.parametrize(("name", "message"), [
    ("torus", "takes parameters"),
    ("ring", "takes parameters"),
    ("ring:8:9", "integers"),
    ("ring:abc", "integers"),
    ("ring:1", "at least 2"),
    ("ring:0", ">= 1"),
    ("torus:4", "takes parameters"),
    ("torus:2x2x2x2", "takes parameters"),
    ("mesh2d:1x1", "at least 2 ranks"),
    ("dgx1:8", "takes no parameters"),
    ("nosuch", "unknown topology"),
    ("", "unknown topology"),
    ("fully_connected:100000", "limited to"),
    ("hypercube:40", "limited to"),
    ("1000xdgx2", "limited to"),
    ("0xdgx2", ">= 1"),
])
def test_bad_names_and_parameters_raise_one_clear_error(name, message):
    with pytest.raises(TopologyError, match=message) as info:
        builtin(name)
    assert isinstance(info.value, CollsynthError)
    assert "\n" not in str(info.value)


def test_unknown_name_lists_the_builtins():
    with pytest.raises(TopologyError) as info:
        builtin("dgx3")
    text = str(info.value)
    assert "dgx2" in text and "torus" in text and "JSON" in text


NVIDIA_SMI_A100 = """\
\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tCPU Affinity\tNUMA Affinity\x1b[0m
GPU0\t X \tNV12\tNV12\tSYS\tPXB\t0-31\t0
GPU1\tNV12\t X \tNV12\tSYS\tSYS\t0-31\t0
GPU2\tNV12\tNV12\t X \tNV4\tSYS\t32-63\t1
GPU3\tSYS\tSYS\tNV4\t X \tSYS\t32-63\t1
NIC0\tPXB\tSYS\tSYS\tSYS\t X

Legend:
  X    = Self
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def test_nvlink_only_parses_nvidia_smi_topo():
    assert parse_nvidia_smi_topo(NVIDIA_SMI_A100) == [
        [0, 12, 12, 0], [12, 0, 12, 0], [12, 12, 0, 4], [0, 0, 4, 0]]
    topo = nvlink_only(NVIDIA_SMI_A100)
    assert topo.num_ranks == 4 and topo.bandwidth(2, 3) == 4 and not topo.has_link(0, 3)
    with pytest.raises(TopologyError, match="no GPU rows"):
        nvlink_only("nothing here")


def test_msccl_star_import_gives_the_builders():
    namespace: dict = {}
    exec("from collsynth.topologies import *", namespace)
    for name in ("fully_connected", "ring", "line", "star", "dgx1", "nvlink_only", "dgx_a100", "hub_and_spoke",
                 "amd4", "amd8", "resolve_topology"):
        assert callable(namespace[name]), name
    assert isinstance(namespace["fully_connected"](4), Topology)
    assert namespace["dgx_a100"]().num_ranks == 8


def test_nvswitch_port_budget_binds_in_verify():
    """A sensible SMT instance: any single send per port per round is fine, two sends out of one port are not."""
    from collsynth.collectives import custom_collective, make_collective
    from collsynth.schedule import Algorithm, AlgorithmError, Send, Step, verify

    topo = builtin("dgx2")
    n = topo.num_ranks
    ring_steps = tuple(Step(1, tuple(Send((r - k) % n, r, (r + 1) % n) for r in range(n))) for k in range(n - 1))
    verify(Algorithm("ring", topo, make_collective("allgather", n), ring_steps))
    two_peers = custom_collective("two_peers", n, [(0, 0, 0)], [(0, 1, 0), (0, 2, 0)])
    fan_out = (Send(0, 0, 1), Send(0, 0, 2))
    with pytest.raises(AlgorithmError, match="port_out_0"):
        verify(Algorithm("fan", topo, two_peers, (Step(1, fan_out),)))
    verify(Algorithm("fan", topo, two_peers, (Step(2, fan_out),)))


@pytest.mark.parametrize("name", ["fully_connected:4096", "hub_and_spoke:2000", "512xndv2"])
def test_dense_builtins_are_refused_before_building_millions_of_links(name):
    from collsynth.topologies import builtin

    with pytest.raises(TopologyError, match="links is above the cap of 1048576 links; raise it with "
                                            "COLLSYNTH_MAX_LINKS"):
        builtin(name)
