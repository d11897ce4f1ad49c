"""MSCCLang's Topology methods answer with MSCCLang's meaning (msccl/topologies/topology.py): num_nodes() is the
rank count, nodes() the ranks, link(src, dst) a bandwidth number, plus sources/destinations/bandwidth_constraints
and the Topology(name, links[dst][src], switches) constructor."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.topologies import Topology, TopologyError, dgx1, distributed, fully_connected, hub_and_spoke, ring
from collsynth.topologies.model import Link


def test_rank_count_and_ranks_are_methods() -> None:
    topo = dgx1()
    assert topo.num_nodes() == 8 and list(topo.nodes()) == list(range(8))
    two = distributed.distributed_fully_connected(ring(4), 2, 1)
    # MSCCLang's num_nodes() counts ranks; the machine count is num_machines
    assert two.num_nodes() == 8 and two.num_machines == 2


def test_link_is_the_bandwidth_number() -> None:
    topo = dgx1()
    assert topo.link(0, 1) == 2 and topo.link(0, 2) == 1 and topo.link(0, 5) == 0
    assert isinstance(topo.link_between(0, 1), Link) and topo.link_between(0, 5) is None
    assert not ring(4).link(0, 2) and ring(4).link(0, 1)  # programs test `topo.link(a, b) or a == b`


def test_sources_destinations_and_constraints_of_a_hub() -> None:
    topo = hub_and_spoke(3)
    assert list(topo.sources(0)) == [1, 2] and list(topo.destinations(2)) == [0, 1]
    constraints = list(topo.bandwidth_constraints())
    per_link = [c for c in constraints if len(c[0]) == 1 and len(c[1]) == 1 and "→" in c[3]]
    assert len(per_link) == 6 and ([1], [0], 1, "1→0") in per_link
    switches = constraints[len(per_link):]
    assert len(switches) == len(topo.switches) and all(bw >= 1 for _, _, bw, _ in switches)
    for srcs, dsts, bw, name in topo.switches:  # a switch unpacks as MSCCLang's tuple
        assert isinstance(name, str) and bw == 1 and srcs and dsts


def test_constructor_takes_mscclang_matrix_and_switches() -> None:
    # links[dst][src]: 1 -> 0 carries 2, 0 -> 1 and 2 -> 1 carry 1, 1 -> 2 carries 1
    topo = Topology("mine", [[0, 2, 0], [1, 0, 1], [0, 1, 0]], [([0], [1, 2], 1, "out0")])
    assert topo.num_ranks == 3 and topo.num_nodes() == 3
    assert topo.link(1, 0) == 2 and topo.link(0, 1) == 1 and topo.link(0, 2) == 0
    assert [tuple(s) for s in topo.switches] == [([0], [1], 1, "out0")]  # only pairs that have a link
    with pytest.raises(TopologyError, match="strictly positive"):
        Topology("bad", [[0, 1], [1, 0]], [([0], [1], 0, "dead")])
    with pytest.raises(TopologyError, match="square"):
        Topology("bad", [[0, 1], [1]])


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 6).flatmap(lambda n: st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                                                   min_size=n, max_size=n)))
def test_matrix_round_trip(matrix: list[list[int]]) -> None:
    """Every MSCCLang method reads back the matrix it was built from (diagonal ignored, as self-links are none)."""
    topo = Topology("m", matrix)
    n = len(matrix)
    for src in range(n):
        for dst in range(n):
            want = matrix[dst][src] if src != dst else 0
            assert topo.link(src, dst) == want
        assert list(topo.destinations(src)) == [d for d in range(n) if d != src and matrix[d][src]]
        assert list(topo.sources(src)) == [s for s in range(n) if s != src and matrix[src][s]]
    assert sorted((c[0][0], c[1][0], c[2]) for c in topo.bandwidth_constraints()) == sorted(
        (s, d, matrix[d][s]) for s in range(n) for d in range(n) if s != d and matrix[d][s])


def test_builder_topologies_match_mscclang_counts() -> None:
    assert sum(1 for _ in fully_connected(5).bandwidth_constraints()) == 20
    assert sorted(ring(5).destinations(0)) == [1, 4]


def test_transformers_reverse_and_binarize() -> None:
    from collsynth.topologies import binarize_topology, reverse_topology

    topo = Topology("t", [[0, 3, 0], [1, 0, 2], [0, 0, 0]], [([0], [1], 1, "s")])
    back = reverse_topology(topo)
    assert back.name == "Reverset" and [tuple(s) for s in back.switches] == [([1], [0], 1, "s_reversed")]
    for src in range(3):
        for dst in range(3):
            assert back.link(src, dst) == topo.link(dst, src)
    flat = binarize_topology(dgx1())
    assert flat.name == f"Binarized{dgx1().name}"
    assert flat.switches == () and {flat.link(0, d) for d in flat.destinations(0)} == {1}
    assert list(flat.destinations(0)) == list(dgx1().destinations(0))


# msccl-tools' link matrices, links[dst][src] (msccl/topologies/nvidia.py dgx1() and dgx_a100(), sccl/topologies/amd.py
# amd4() and amd8() at microsoft/msccl-tools 215ec98), written out here as the reference the builders must equal
MSCCL_DGX1 = [[0, 2, 1, 1, 2, 0, 0, 0], [2, 0, 1, 2, 0, 1, 0, 0], [1, 1, 0, 2, 0, 0, 2, 0], [1, 2, 2, 0, 0, 0, 0, 1],
              [2, 0, 0, 0, 0, 2, 1, 1], [0, 1, 0, 0, 2, 0, 1, 2], [0, 0, 2, 0, 1, 1, 0, 2], [0, 0, 0, 1, 1, 2, 2, 0]]
MSCCL_DGX_A100 = [[0 if d == s else 12 for s in range(8)] for d in range(8)]
MSCCL_AMD4 = [[0, 1, 1, 0], [1, 0, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]]
MSCCL_AMD8 = [[0, 5, 6, 6, 5, 6, 5, 5], [5, 0, 5, 5, 6, 5, 6, 6], [6, 5, 0, 6, 5, 6, 5, 5], [6, 5, 6, 0, 5, 6, 5, 5],
              [5, 6, 5, 5, 0, 5, 6, 6], [6, 5, 6, 6, 5, 0, 5, 5], [5, 6, 5, 5, 6, 5, 0, 6], [5, 6, 5, 5, 6, 5, 6, 0]]


def _matrix(topo: Topology) -> list[list[int]]:
    return [[topo.link(src, dst) for src in topo.nodes()] for dst in topo.nodes()]


@pytest.mark.parametrize("module, name, want", [
    ("nvidia", "dgx1", MSCCL_DGX1), ("nvidia", "dgx_a100", MSCCL_DGX_A100),
    ("amd", "amd4", MSCCL_AMD4), ("amd", "amd8", MSCCL_AMD8)])
def test_machine_builders_have_mscclang_links(module: str, name: str, want: list[list[int]]) -> None:
    import importlib

    topo = getattr(importlib.import_module(f"collsynth.topologies.{module}"), name)()
    assert topo is not None and _matrix(topo) == want
    assert topo.switches == ()  # none of MSCCLang's machine models has switch budgets
    assert getattr(importlib.import_module("collsynth.topologies"), name)().fingerprint() == topo.fingerprint()


def test_builtins_of_the_same_names_stay_collsynths_machine_models() -> None:
    from collsynth.topologies import builtin, dgx_a100, mi300x, ndv4

    assert builtin("dgx_a100").fingerprint() == ndv4().fingerprint() != dgx_a100().fingerprint()
    assert builtin("amd8").fingerprint() == mi300x().fingerprint()
    assert len(ndv4().switches) == 16  # one port budget per GPU and direction


def test_generic_module_is_mscclangs() -> None:
    from collsynth.topologies.generic import fully_connected as fc
    from collsynth.topologies.generic import hub_and_spoke as hs
    from collsynth.topologies.generic import line, star
    from collsynth.topologies.topology import Topology as MscclTopology

    assert MscclTopology is Topology
    assert _matrix(fc(3)) == [[0, 1, 1], [1, 0, 1], [1, 1, 0]]
    assert _matrix(line(3)) == [[0, 1, 0], [1, 0, 1], [0, 1, 0]]
    assert _matrix(star(3)) == [[0, 1, 1], [1, 0, 0], [1, 0, 0]] and star(3).switches == ()
    # MSCCLang's blocking star: ([0], points, 1, ...) and (points, [0], 1, ...); hub and spoke: one pair per rank
    assert sorted(tuple(s)[:3] for s in star(3, non_blocking=False).switches) == [([0], [1, 2], 1), ([1, 2], [0], 1)]
    assert sorted(tuple(s)[:3] for s in hs(3).switches) == sorted(
        [([r], [o for o in range(3) if o != r], 1) for r in range(3)] + [([o for o in range(3) if o != r], [r], 1)
                                                                        for r in range(3)])


def test_mscclang_dgx1_program_runs_with_its_imports_changed(capsys) -> None:
    """msccl-tools examples/mscclang/allreduce_dgx1.py (2 nodes), imports changed from msccl. to collsynth.; its
    `c.reduce(rank, buffer, index)` / `c.send(...)` are the older SCCLang spelling that msccl-tools' current Ref
    no longer has, written here as current MSCCLang's `chunk(...).reduce(c)` / `c.copy(...)`."""
    from collsynth.language import XML, Buffer, Check, MSCCLProgram, chunk
    from collsynth.language.collectives import AllReduce
    from collsynth.topologies.distributed import distributed_fully_connected
    from collsynth.topologies.nvidia import dgx1

    num_nodes, num_local_gpus = 2, 8
    topology = distributed_fully_connected(dgx1(), num_nodes, 1)
    size = topology.num_nodes()
    local_ring_order = [1, 3, 2, 6, 7, 5, 4, 0]

    def rank(n: int, g: int) -> int:
        return local_ring_order[g] + n * num_local_gpus

    def reduce_into(c, r: int):
        return chunk(r, Buffer.input, 0).reduce(c)

    with MSCCLProgram("allreduce_ring_dgx1", topology, AllReduce(size, 1, True), 1):
        for n in range(num_nodes):
            c = chunk(rank(n, 0), Buffer.input, 0)
            for g in range(1, 8):
                c = reduce_into(c, rank(n, g))
        chunk(0, Buffer.input, 0).copy(9, "scratch", 0)
        reduce_into(chunk(8, Buffer.input, 0).copy(1, "scratch", 0), 0)
        reduce_into(chunk(9, "scratch", 0), 8)
        for n in range(num_nodes):
            c = chunk(rank(n, 7), Buffer.input, 0)
            for g in range(6, -1, -1):
                c = c.copy(rank(n, g), Buffer.input, 0)
        XML()
        assert Check()
    assert "<algo" in capsys.readouterr().out


def test_links_is_mscclangs_matrix_and_link_list_is_ours() -> None:
    topo = dgx1()
    assert len(topo.links) == topo.num_nodes() == 8 and topo.links == tuple(tuple(row) for row in MSCCL_DGX1)
    assert all(topo.links[d][s] == topo.link(s, d) for s in topo.nodes() for d in topo.nodes())
    assert all(isinstance(x, Link) for x in topo.link_list) and len(topo.link_list) == 32
    with pytest.raises(TypeError):  # a Topology does not change under its users
        topo.links[0][1] = 5


def test_switches_read_as_mscclangs_tuples() -> None:
    hub = hub_and_spoke(3)
    out0 = next(s for s in hub.switches if s[0] == [0])
    assert len(out0) == 4 and out0[1] == [1, 2] and out0[2] == 1 and isinstance(out0[3], str)
    assert list(hub.bandwidth_constraints())[-len(hub.switches):] == [tuple(s) for s in hub.switches]


def test_distributed_copies_mscclangs_matrix() -> None:
    """msccl-tools' distributed_fully_connected: remote_bw between copies, the local matrix inside each copy."""
    local = Topology("pair", [[0, 2], [3, 0]])
    two = distributed.distributed_fully_connected(local, 2, 4)
    want = [[4 if s // 2 != d // 2 else local.links[d % 2][s % 2] for s in range(4)] for d in range(4)]
    assert two.links == tuple(tuple(row) for row in want)


def test_a_program_that_routes_over_the_matrix_runs(capsys) -> None:
    """MSCCLang-style user code that reads `topology.links[dst][src]` to route an AllGather over breadth-first trees
    of DGX-1's NVLinks, checked in the reference interpreter."""
    from collsynth.language import XML, Buffer, Check, MSCCLProgram, chunk
    from collsynth.language.collectives import AllGather

    topology = dgx1()
    size = topology.num_nodes()

    def tree_edges(root: int) -> list[tuple[int, int]]:
        seen, frontier, edges = {root}, [root], []
        while frontier:
            nxt = []
            for u in frontier:
                for v, row in enumerate(topology.links):
                    if row[u] and v not in seen:
                        seen.add(v)
                        nxt.append(v)
                        edges.append((u, v))
            frontier = nxt
        return edges

    with MSCCLProgram("bfs_allgather", topology, AllGather(size, 1, False), 1):
        for root in range(size):
            chunk(root, Buffer.input, 0).copy(root, Buffer.output, root)
            for u, v in tree_edges(root):
                chunk(u, Buffer.output, root).copy(v, Buffer.output, root)
        XML()
        assert Check()
    assert "<algo" in capsys.readouterr().out


def test_no_stage_reads_a_topologys_links_as_collsynths_links() -> None:
    """`.links` is MSCCLang's matrix; collsynth code means `link_list` (same length only by accident, so `len()` of
    the wrong one would pass silently)."""
    import ast
    from pathlib import Path

    import collsynth

    root = Path(collsynth.__file__).parent
    wrong = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "model.py" and path.parent.name == "topologies":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "links":
                base = node.value
                name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                if name in ("topology", "topo", "topology_", "local_topology"):
                    wrong.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not wrong, f"use .link_list (collsynth's links) at: {wrong}"


def test_mscclang_namesake_modules_use_mscclang_names_and_switch_names() -> None:
    """A program can read `topology.name` and the switches' names: the namesake modules answer with MSCCLang's
    (msccl/topologies/generic.py, nvidia.py; sccl/topologies/amd.py, distributed.py), in MSCCLang's order, while
    `collsynth.topologies`' own builders keep the names `resolve_topology` reads back."""
    from collsynth.topologies import amd, generic, nvidia
    from collsynth.topologies import line as collsynth_line

    assert [generic.fully_connected(4).name, generic.ring(5).name, generic.line(3).name, generic.star(4).name,
            generic.hub_and_spoke(3).name] == ["FullyConnected(n=4)", "Ring(n=5)", "Line(n=3)", "Star(n=4)",
                                               "HubAndSpoke(n=3)"]
    assert [s[3] for s in generic.star(4, non_blocking=False).switches] == ["to_points", "from_points"]
    hub = generic.hub_and_spoke(3)
    assert [s[3] for s in hub.switches] == ["node_0_out", "node_0_in", "node_1_out", "node_1_in", "node_2_out",
                                            "node_2_in"]
    assert hub.switches[0][:3] == ([0], [1, 2], 1) and hub.switches[1][:3] == ([1, 2], [0], 1)
    assert [nvidia.dgx1().name, nvidia.dgx_a100().name, amd.amd4().name, amd.amd8().name] == [
        "DGX1", "DGX_A100", "AMD4", "AMD8"]
    two = distributed.distributed_hub_and_spoke(generic.hub_and_spoke(2), 2, 1)
    assert two.name == "DistributedHubAndSpoke(local=HubAndSpoke(n=2),copies=2,bw=1)"
    assert [s[3] for s in two.switches][:4] == ["copy_0_node_0_out_local", "copy_1_node_0_out_local",
                                                "copy_0_node_0_in_local", "copy_1_node_0_in_local"]
    assert generic.line(3).fingerprint() == collsynth_line(3).fingerprint() and collsynth_line(3).name == "line:3"
