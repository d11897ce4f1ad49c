"""The hand-written library: every program at 8, 16 and 64 ranks compiles, round-trips through XML, passes
the CPU interpreter and stays within the MSCCL runtime limits; shapes it cannot take are refused clearly."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.algorithms import (
    LIBRARY,
    AlgorithmError,
    binary_tree_parents,
    build,
    double_binary_tree_allreduce,
    double_binary_trees,
    find_ring,
    hierarchical_allreduce,
    library_programs,
    recursive_doubling_allgather,
    ring_allreduce,
    three_step_alltoall,
    two_step_alltoall,
)
from collsynth.compiler import compile_program, instance_collective
from collsynth.core.errors import CollsynthError
from collsynth.core.limits import MAX_TBS_PER_CHANNEL
from collsynth.emit.msccl_xml import ir_to_xml, read_xml, write_xml
from collsynth.ir import MAX_CHANNELS, MAX_COUNT, MAX_STEPS_PER_TB, NOP
from collsynth.ir.validate import validate
from collsynth.language import run_symbolic
from collsynth.language.symbolic import check_postcondition
from collsynth.runtime import execute
from collsynth.topologies.library import fully_connected
from collsynth.topologies.model import Link, Topology

NODES = {8: 2, 16: 2, 64: 8}  # node count used for multi-node programs at each size


def topology_for(name: str, n: int, nodes: int | None = None) -> Topology:
    """Fully connected; multi-node programs (and AllToNext) get NODES[n] equal nodes of consecutive ranks."""
    entry = LIBRARY[name]
    topo = fully_connected(n)
    if nodes is None and (entry.multi_node or name == "alltonext"):
        nodes = NODES.get(n, 2)
    if nodes is not None:
        topo = replace(topo, name=f"{topo.name}/{nodes}nodes", machines=tuple(r // (n // nodes) for r in range(n)))
    return topo


def default_params(name: str) -> dict:
    return {"channels": 2} if "channels" in LIBRARY[name].parameters else {}


CASES = [pytest.param(name, n, id=f"{name}-{n}") for name in LIBRARY for n in (8, 16, 64)
         if LIBRARY[name].fits(n, NODES[n]) is None]


def assert_within_limits(ir) -> None:
    validate(ir)
    assert ir.nchannels <= MAX_CHANNELS
    per_channel = Counter()
    for gpu, tb in ir.threadblocks():
        assert len(tb.steps) <= MAX_STEPS_PER_TB, f"gpu {gpu.id} tb {tb.id}: {len(tb.steps)} steps"
        assert 0 <= tb.chan < MAX_CHANNELS
        per_channel[gpu.id, tb.chan] += 1
        for step in tb.steps:
            assert step.type == NOP or 1 <= step.cnt <= MAX_COUNT
    worst = max(per_channel.values())
    assert worst <= MAX_TBS_PER_CHANNEL, f"{worst} threadblocks on one channel of one GPU"


def run_ir(ir, program, elems_per_chunk: int = 2):
    coll = instance_collective(program.collective, program.instances)
    return execute(ir, backend="cpu", nbytes=coll.input_chunks * elems_per_chunk * 4, collective=coll)


@pytest.mark.parametrize(("name", "n"), CASES)
def test_library_program(name: str, n: int) -> None:
    program = LIBRARY[name].builder(topology_for(name, n), **default_params(name))
    assert program.num_ranks == n and program.ops
    ir = compile_program(program)
    assert ir.ngpus == n
    assert_within_limits(ir)
    assert read_xml(ir_to_xml(ir)) == ir
    result = run_ir(ir, program, elems_per_chunk=2 if n == 64 else 8)
    assert result.passed, str(result)


INPLACE = [pytest.param(name, id=name) for name, entry in LIBRARY.items() if entry.inplace]


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_variants(name: str) -> None:
    program = LIBRARY[name].builder(topology_for(name, 8), inplace=True, **default_params(name))
    assert program.collective.inplace
    ir = compile_program(program)
    assert ir.inplace
    assert read_xml(ir_to_xml(ir)) == ir
    result = run_ir(ir, program)
    assert result.passed, str(result)


@pytest.mark.parametrize("name", [n for n, e in LIBRARY.items() if not e.inplace])
def test_inplace_refused_where_unsupported(name: str) -> None:
    with pytest.raises(AlgorithmError, match="inplace is not supported"):
        LIBRARY[name].builder(topology_for(name, 8), inplace=True)


@pytest.mark.parametrize(("name", "params"), [
    ("ring_allreduce", {"channels": 2, "instances": 2, "protocol": "LL"}),
    ("allpairs_allreduce_two_phase", {"chunks": 2, "instances": 2}),
    ("double_binary_tree_allreduce", {"segments": 2, "instances": 3, "protocol": "LL128"}),
    ("hierarchical_allreduce", {"instances": 2}),
    ("recursive_halving_doubling_allreduce", {"instances": 2, "chunks": 2}),
    ("allpairs_alltoall", {"instances": 2, "inplace": True}),
    ("alltonext", {"instances": 2}),
    ("recursive_doubling_allgather", {"instances": 2}),
    ("two_step_alltoall", {"num_nodes": 2, "instances": 2}),
    ("three_step_alltoall", {"num_nodes": 2, "instances": 3}),
])
def test_instances_and_protocols(name: str, params: dict) -> None:
    program = LIBRARY[name].builder(topology_for(name, 8), **params)
    ir = compile_program(program)
    assert ir.proto == params.get("protocol", "Simple")
    assert ir.nchannels >= params["instances"]
    assert_within_limits(ir)
    result = run_ir(ir, program)
    assert result.passed, str(result)


def test_multi_tile_execution() -> None:
    program = ring_allreduce(fully_connected(8), channels=2)
    ir = compile_program(program)
    coll = program.collective
    # 64 elements per chunk in tiles of 16: each tile runs the whole program.
    result = execute(ir, backend="cpu", nbytes=coll.input_chunks * 64 * 4, collective=coll, tile_bytes=16 * 4)
    assert result.passed and result.tiles > 1, str(result)


def test_xml_file_round_trip(tmp_path) -> None:
    program = hierarchical_allreduce(topology_for("hierarchical_allreduce", 16))
    ir = compile_program(program)
    path = tmp_path / "hier.xml"
    write_xml(ir, path)
    assert read_xml(path) == ir


# --- refusals --------------------------------------------------------------------------------------

def test_runtime_limit_refused_with_clear_message() -> None:
    program = ring_allreduce(fully_connected(8), channels=2, instances=17)  # 34 channels > 32
    with pytest.raises(CollsynthError, match="32"):
        compile_program(program)


@pytest.mark.parametrize(("name", "topology", "params", "message"), [
    ("recursive_doubling_allgather", fully_connected(12), {}, "power-of-two"),
    ("recursive_halving_doubling_allreduce", fully_connected(6), {}, "power-of-two"),
    ("hierarchical_allreduce", fully_connected(8), {}, "at least 2 nodes .*pass num_nodes="),
    ("hierarchical_allreduce", fully_connected(8), {"num_nodes": 3}, "same number of GPUs on every node"),
    ("two_step_alltoall", fully_connected(8), {"num_nodes": 1}, "at least 2 nodes"),
    ("double_binary_tree_allreduce", fully_connected(5), {"chunks": 1}, "even chunks"),
    ("double_binary_tree_allreduce", fully_connected(8), {"segments": 9}, "segments must be in 1..4"),
    ("binomial_tree_allreduce", fully_connected(4), {"segments": 0}, "segments must be in"),
    ("ring_allreduce", fully_connected(4), {"ring": [0, 1, 2]}, "every rank"),
    ("ring_allreduce", fully_connected(4), {"protocol": "fast"}, "unknown protocol"),
    ("allpairs_alltoall", fully_connected(4), {"instances": 0}, "instances must be >= 1"),
])
def test_bad_shapes_and_parameters(name: str, topology: Topology, params: dict, message: str) -> None:
    with pytest.raises(AlgorithmError, match=message):
        build(name, topology, **params)


def test_build_refuses_unknown_name_and_unfit_shape() -> None:
    with pytest.raises(AlgorithmError, match="unknown library program 'ring'"):
        build("ring", fully_connected(4))
    with pytest.raises(AlgorithmError, match="powers of two"):
        build("recursive-doubling-allgather", fully_connected(6))


def test_missing_ring_link_names_the_step() -> None:
    line = Topology("line4", 4, tuple(Link(a, b) for a, b in [(0, 1), (1, 0), (1, 2), (2, 1), (2, 3), (3, 2)]))
    with pytest.raises(AlgorithmError, match="no ring through all 4 ranks"):
        ring_allreduce(line)
    ring = fully_connected(4)
    one_way = Topology("oneway", 4, tuple(x for x in ring.link_list if (x.dst - x.src) % 4 == 1))
    with pytest.raises(AlgorithmError, match="ring step 0->2"):
        ring_allreduce(one_way, ring=[0, 2, 1, 3])


# --- the algorithms are what they claim -------------------------------------------------------------

def _depth(parents, rank: int) -> int:
    d = 0
    while parents[rank] is not None:
        rank, d = parents[rank], d + 1
    return d


@pytest.mark.parametrize("n", [2, 3, 5, 7, 8, 16, 33, 64])
def test_double_binary_trees_are_complementary(n: int) -> None:
    trees = double_binary_trees(n)
    inner = []
    for parents in trees:
        assert sum(p is None for p in parents) == 1
        kids = Counter(p for p in parents if p is not None)
        assert max(kids.values()) <= 2  # binary
        assert max(_depth(parents, r) for r in range(n)) <= n.bit_length() + 1  # balanced
        inner.append({r for r in kids})
    assert len(inner[0] & inner[1]) <= 1  # at most one rank forwards in both trees
    assert binary_tree_parents(n) == trees[0]


def test_double_binary_tree_halves_and_pipelines() -> None:
    n, segments = 16, 4
    program = double_binary_tree_allreduce(fully_connected(n), segments=segments)
    half = program.collective.input_chunks // 2
    trees = double_binary_trees(n)
    starts = [set(), set()]
    for op in program.ops:
        if op.op != "reduce":
            continue
        tree = 0 if op.dst.index < half else 1
        assert op.dst.index + op.dst.count <= (tree + 1) * half  # a segment never straddles the halves
        assert trees[tree][op.src.rank] == op.dst.rank  # child reduces into its parent in that tree
        assert op.channel == tree
        starts[tree].add(op.dst.index)
    assert len(starts[0]) == len(starts[1]) == segments
    ir = compile_program(program)
    # The segments stay separate steps in the IR (not merged back into one transfer): pipelining.
    assert max(len(tb.steps) for _, tb in ir.threadblocks()) >= segments


def test_two_step_alltoall_sends_one_aggregated_copy_per_gpu_and_remote_node() -> None:
    nodes, gpus = 4, 4
    topology = topology_for("two_step_alltoall", 16, nodes)
    program = two_step_alltoall(topology, chunks=2)
    inter = [op for op in program.ops if topology.node_of(op.src.rank) != topology.node_of(op.dst.rank)]
    assert len(inter) == nodes * (nodes - 1) * gpus
    for op in inter:
        assert op.src.count == gpus * 2  # every block from the node, bound for one GPU, in one copy
        assert op.src.rank % gpus == op.dst.rank % gpus  # between GPUs of the same local index
        assert op.dst.buffer == "output"


def test_three_step_alltoall_sends_one_bulk_copy_per_node_pair() -> None:
    nodes, gpus = 3, 4
    topology = topology_for("three_step_alltoall", 12, nodes)
    program = three_step_alltoall(topology)
    inter = [op for op in program.ops if topology.node_of(op.src.rank) != topology.node_of(op.dst.rank)]
    assert len(inter) == nodes * (nodes - 1)
    assert {op.src.count for op in inter} == {gpus * gpus}


def test_hierarchical_allreduce_crosses_nodes_with_a_gpus_share() -> None:
    nodes, gpus = 2, 4
    topology = topology_for("hierarchical_allreduce", 8, nodes)
    program = hierarchical_allreduce(topology)
    inter = [op for op in program.ops if topology.node_of(op.src.rank) != topology.node_of(op.dst.rank)]
    intra = [op for op in program.ops if op not in inter and op.src.rank != op.dst.rank]
    total = program.collective.input_chunks
    # Each GPU sends (nodes-1)/nodes of its 1/gpus share across nodes in each of the RS and AG phases.
    per_gpu = Counter(op.src.rank for op in inter for _ in range(op.src.count))
    assert set(per_gpu.values()) == {2 * (nodes - 1) * total // (nodes * gpus)}
    assert all(op.src.rank % gpus == op.dst.rank % gpus for op in inter)
    assert intra


def test_recursive_doubling_rounds() -> None:
    n = 16
    program = recursive_doubling_allgather(fully_connected(n))
    remote = Counter(op.src.rank for op in program.ops if op.src.rank != op.dst.rank)
    assert set(remote.values()) == {4}  # log2(16) rounds, one copy each
    sizes = sorted({op.src.count for op in program.ops if op.src.rank != op.dst.rank})
    assert sizes == [1, 2, 4, 8]


def test_ring_channels_run_both_directions() -> None:
    program = ring_allreduce(fully_connected(6), channels=2, ring=[0, 2, 4, 1, 3, 5])
    hops = {op.channel: set() for op in program.ops}
    for op in program.ops:
        if op.src.rank != op.dst.rank:
            hops[op.channel].add((op.src.rank, op.dst.rank))
    forward = {(a, b) for a, b in zip([0, 2, 4, 1, 3, 5], [2, 4, 1, 3, 5, 0], strict=True)}
    assert hops[0] == forward
    assert hops[1] == {(b, a) for a, b in forward}


def test_find_ring() -> None:
    from collsynth.topologies import resolve_topology

    dgx1 = resolve_topology("dgx1")
    ring = find_ring(dgx1)
    assert ring is not None and sorted(ring) == list(range(8))
    assert all(dgx1.has_link(ring[k], ring[(k + 1) % 8]) for k in range(8))
    assert find_ring(resolve_topology("star:5")) is None
    two = resolve_topology("2xndv2")
    ring = find_ring(two)
    crossings = sum(two.node_of(ring[k]) != two.node_of(ring[(k + 1) % 16]) for k in range(16))
    assert crossings == 2


# --- library_programs --------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "collective", "expected"), [
    ("fully_connected:8", "AllReduce", {"ring_allreduce", "allpairs_allreduce_one_phase",
                                         "allpairs_allreduce_two_phase", "recursive_halving_doubling_allreduce",
                                         "binomial_tree_allreduce", "double_binary_tree_allreduce"}),
    ("ring:8", "allreduce", {"ring_allreduce"}),
    ("star:5", "allgather", set()),
    ("dgx1", "allgather", {"ring_allgather", "recursive_doubling_allgather"}),
    ("2xndv4", "alltoall", {"allpairs_alltoall", "two_step_alltoall", "three_step_alltoall"}),
    ("2xndv2", "allreduce", {"ring_allreduce", "recursive_halving_doubling_allreduce", "binomial_tree_allreduce",
                             "hierarchical_allreduce"}),
    ("line:4", "alltonext", {"alltonext"}),
])
def test_library_programs_fit_the_topology(spec: str, collective: str, expected: set) -> None:
    from collsynth.topologies import resolve_topology

    topology = resolve_topology(spec)
    programs = library_programs(topology, collective)
    assert {name for name, _ in programs} == expected
    for name, program in programs:
        assert program.topology == topology
        ir = compile_program(program)
        result = run_ir(ir, program)
        assert result.passed, f"{name} on {spec}: {result}"


# --- property: random shapes are correct, symbolically and in the interpreter -----------------------

@st.composite
def shapes(draw):
    name = draw(st.sampled_from(sorted(LIBRARY)))
    entry = LIBRARY[name]
    n = draw(st.integers(2, 12))
    divisors = [d for d in range(2, n + 1) if n % d == 0]
    nodes = draw(st.sampled_from(divisors)) if entry.multi_node or name == "alltonext" else None
    if entry.fits(n, nodes or 1) is not None:
        n, nodes = 8, (2 if nodes else None)
    params: dict = {}
    if "chunks" in entry.parameters:
        params["chunks"] = draw(st.integers(1, 3)) * (2 if name == "double_binary_tree_allreduce" else 1)
    if "channels" in entry.parameters:
        params["channels"] = draw(st.integers(1, 3))
    if "segments" in entry.parameters:
        params["segments"] = draw(st.integers(1, 2))
    if entry.inplace:
        params["inplace"] = draw(st.booleans())
    return name, n, nodes, params


@given(shapes())
def test_random_shapes_are_correct(shape) -> None:
    name, n, nodes, params = shape
    topology = fully_connected(n)
    if nodes is not None:
        topology = replace(topology, machines=tuple(r // (n // nodes) for r in range(n)))
    program = LIBRARY[name].builder(topology, **params)
    assert check_postcondition(run_symbolic(program)) == []
    result = run_ir(compile_program(program), program)
    assert result.passed, f"{name} n={n} nodes={nodes} {params}: {result}"
