"""Chakra ET export: every step type converts, send/recv pairs match, deps are local and acyclic, round trip."""

from __future__ import annotations

import importlib.util
import math
import sys
from collections import Counter
from pathlib import Path

import pytest

from collsynth.cli import main
from collsynth.emit import chakra_schema as et
from collsynth.emit.chakra import (
    ChakraError,
    export_chakra,
    node_attrs,
    node_head,
    read_chakra,
    trace_paths,
    write_trace,
)
from collsynth.emit.msccl_xml import write_xml
from collsynth.ir import Algo, Gpu, Step, Threadblock


def _sim_irs():
    """The hand-built IRs shared with the simulator tests (tests/sim/sim_irs.py)."""
    if "sim_irs" not in sys.modules:
        spec = importlib.util.spec_from_file_location("sim_irs", Path(__file__).parents[1] / "sim" / "sim_irs.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules["sim_irs"] = module
    return sys.modules["sim_irs"]


IRS = _sim_irs()
MiB = 1 << 20


def load_all(paths: list[Path]) -> dict[int, tuple[object, list[object]]]:
    traces = {}
    for path in paths:
        metadata, nodes = read_chakra(path)
        traces[node_attrs(metadata)["rank"]] = (metadata, nodes)
    return traces


def comm_messages(traces, node_type: int) -> Counter:
    """(src, dst, size, tag) of every node of one COMM type across all ranks."""
    found: Counter = Counter()
    for rank, (_, nodes) in traces.items():
        for node in nodes:
            if node.type == node_type:
                attrs = node_attrs(node)
                found[(attrs["comm_src"], attrs["comm_dst"], attrs["comm_size"], attrs["comm_tag"])] += 1
                assert rank == (attrs["comm_src"] if node_type == et.COMM_SEND_NODE else attrs["comm_dst"])
    return found


def test_every_step_type_converts(tmp_path) -> None:
    ir = IRS.every_step_type_ir()
    paths = export_chakra(ir, tmp_path, "every", nbytes=4 * MiB)
    assert [p.name for p in paths] == ["every.0.et", "every.1.et", "every.2.et"]
    assert paths == trace_paths(tmp_path, "every", [0, 1, 2])
    traces = load_all(paths)
    kinds = {rank: [(node.name.split()[0], node.type) for node in nodes] for rank, (_, nodes) in traces.items()}
    # rank 1 holds rcs, rrs, rrcs, rrc, nop, cpy, re
    assert kinds[1] == [
        ("rcs", et.COMM_RECV_NODE), ("rcs", et.COMM_SEND_NODE),
        ("rrs", et.COMM_RECV_NODE), ("rrs", et.COMM_SEND_NODE),  # fused reductions stream with the data
        ("rrcs", et.COMM_RECV_NODE), ("rrcs", et.COMM_SEND_NODE),
        ("rrc", et.COMM_RECV_NODE),
        ("nop", et.COMP_NODE), ("cpy", et.COMP_NODE), ("re", et.COMP_NODE),
    ]
    assert [kind for kind, _ in kinds[0]] == ["s"] * 4
    assert kinds[2] == [("r", et.COMM_RECV_NODE), ("rrc", et.COMM_RECV_NODE), ("r", et.COMM_RECV_NODE)]
    # sizes: a chunk is 4 MiB / nchunksperloop(4) = 1 MiB, a step moves cnt chunks
    sizes = [node_attrs(n)["comm_size"] for n in traces[0][1]]
    assert sizes == [MiB, MiB, 2 * MiB, MiB]
    # COMP durations (collsynth.core.costs): alpha + MiB * beta per tile, rounded up; nop is free
    comp = {n.name: n for n in traces[1][1] if n.type == et.COMP_NODE}
    assert comp["nop tb1 s0 nop"].duration_micros == 0
    assert comp["cpy tb1 s1 cpy"].duration_micros == math.ceil(0.1 + 2.0 * 1)  # one 1 MiB chunk, one tile
    assert node_attrs(comp["cpy tb1 s1 cpy"])["duration_nanos"] == 2100


@pytest.mark.parametrize("make", [lambda: IRS.ring_allreduce_ir(8), IRS.every_step_type_ir,
                                  lambda: IRS.chain_broadcast_ir(5), IRS.fan_in_ir])
def test_send_recv_pairs_match_across_ranks(tmp_path, make) -> None:
    traces = load_all(export_chakra(make(), tmp_path, nbytes=8 * MiB))
    sends = comm_messages(traces, et.COMM_SEND_NODE)
    recvs = comm_messages(traces, et.COMM_RECV_NODE)
    assert sends and sends == recvs
    assert max(sends.values()) == 1  # (src, dst, tag) identifies one message


def test_data_deps_are_within_rank_and_acyclic(tmp_path) -> None:
    for ir in (IRS.ring_allreduce_ir(6), IRS.every_step_type_ir(), IRS.local_ops_ir()):
        for path in export_chakra(ir, tmp_path, ir.name, nbytes=MiB):
            _, nodes = read_chakra(path)
            ids = [node.id for node in nodes]
            assert ids == list(range(len(nodes)))
            for node in nodes:
                assert not node.ctrl_deps
                assert all(0 <= dep < node.id for dep in node.data_deps)  # earlier node of this file: acyclic


def test_dependencies_follow_threadblock_order_and_depid(tmp_path) -> None:
    traces = load_all(export_chakra(IRS.every_step_type_ir(), tmp_path, nbytes=4 * MiB))
    nodes = {n.name: n for n in traces[1][1]}
    by_id = {n.id: n.name for n in traces[1][1]}
    # the nop waits on tb0 step 2 (rrcs): its last node, the send
    assert [by_id[d] for d in nodes["nop tb1 s0 nop"].data_deps] == ["rrcs tb0 s2 send"]
    # cpy follows the nop in its threadblock and waits on tb0 step 3 (rrc): its receive
    assert [by_id[d] for d in nodes["cpy tb1 s1 cpy"].data_deps] == ["nop tb1 s0 nop", "rrc tb0 s3 recv"]
    assert [by_id[d] for d in nodes["rrs tb0 s1 send"].data_deps] == ["rrs tb0 s1 recv"]
    # a dependency on a threadblock listed later is still placed first
    later = Algo("later", "custom", "Simple", 1, 1, 1, False, (Gpu(0, 1, 1, 0, (
        Threadblock(0, -1, -1, 0, (Step(0, "re", "i", 0, "o", 0, 1, depid=1, deps=0),)),
        Threadblock(1, -1, -1, 0, (Step(0, "cpy", "i", 0, "o", 0, 1, hasdep=True),)),
    )),))
    _, ordered = read_chakra(export_chakra(later, tmp_path, "later")[0])
    assert [n.name for n in ordered] == ["cpy tb1 s0 cpy", "re tb0 s0 re"]
    assert list(ordered[1].data_deps) == [0]


def test_round_trip(tmp_path) -> None:
    ir = IRS.ring_allreduce_ir(4)
    paths = export_chakra(ir, tmp_path / "a", "ring", nbytes=4 * MiB)
    metadata, nodes = read_chakra(paths[2])
    meta = node_attrs(metadata)
    assert metadata.version == "0.0.4"
    assert meta == {"algorithm": ir.name, "collective": "allreduce", "protocol": "Simple", "ngpus": 4, "rank": 2,
                    "nbytes": 4 * MiB, "nchunksperloop": 4, "comm_size": 4 * MiB, "exporter": "collsynth"}
    assert len(nodes) == 1 + 2 * 2 + 2 + 2 * 2 + 1  # s, 2 x rrs, rrcs, 2 x rcs, r (fused: no COMP node)
    copy = write_trace(tmp_path / "copy.et", metadata, nodes)
    metadata2, nodes2 = read_chakra(copy)
    assert metadata2 == metadata and nodes2 == nodes
    # exactly the four traces: no temporary files left behind
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [f"ring.{r}.et" for r in range(4)]


def test_files_hold_no_xml_and_stay_small(tmp_path) -> None:
    ir = IRS.ring_allreduce_ir(16)
    for path in export_chakra(ir, tmp_path, nbytes=MiB):
        data = path.read_bytes()
        assert b"<algo" not in data and b"<gpu" not in data
        assert len(data) < 12_000  # ~ 80 nodes of < 100 bytes, for this rank only


def test_attribute_types_follow_the_chakra_feeder(tmp_path) -> None:
    _, nodes = read_chakra(export_chakra(IRS.send_recv_ir(), tmp_path, nbytes=MiB)[0])
    kinds = {attr.name: attr.WhichOneof("value") for attr in nodes[0].attr}
    assert kinds == {"comm_src": "int32_val", "comm_dst": "int32_val", "comm_size": "int64_val",
                     "comm_tag": "int32_val", "is_cpu_op": "bool_val"}


def test_schema_field_numbers() -> None:
    fields = {f.name: f.number for f in et.Node.DESCRIPTOR.fields}
    assert fields == {"id": 1, "name": 2, "type": 3, "ctrl_deps": 4, "data_deps": 5, "start_time_micros": 6,
                      "duration_micros": 7, "inputs": 8, "outputs": 9, "attr": 10}
    attrs = {f.name: f.number for f in et.AttributeProto.DESCRIPTOR.fields}
    assert attrs["int32_val"] == 7 and attrs["int64_val"] == 9 and attrs["bool_val"] == 27
    assert attrs["string_val"] == 29 and attrs["bytes_list"] == 32
    assert {f.name: f.number for f in et.GlobalMetadata.DESCRIPTOR.fields} == {"version": 1, "attr": 2}
    assert et.Node.DESCRIPTOR.fields_by_name["type"].enum_type.values_by_name["COMM_RECV_NODE"].number == 6


def test_bad_irs_are_rejected(tmp_path) -> None:
    ir = IRS.send_recv_ir()
    lonely = Algo("x", "custom", "Simple", 1, 1, 2, False, (ir.gpus[0], Gpu(1, 1, 1, 0, ())))
    with pytest.raises(ChakraError, match="1 sends but 0 receives"):
        export_chakra(lonely, tmp_path)
    cycle = Algo("cycle", "custom", "Simple", 1, 1, 1, False, (Gpu(0, 1, 1, 0, (
        Threadblock(0, -1, -1, 0, (Step(0, "cpy", "i", 0, "o", 0, 1, depid=1, deps=0, hasdep=True),)),
        Threadblock(1, -1, -1, 0, (Step(0, "cpy", "i", 0, "o", 0, 1, depid=0, deps=0, hasdep=True),)),
    )),))
    with pytest.raises(ChakraError, match="cycle"):
        export_chakra(cycle, tmp_path)
    with pytest.raises(ChakraError, match="prefix"):
        export_chakra(ir, tmp_path, prefix="../up")
    assert list(tmp_path.iterdir()) == []  # nothing written for a rejected IR


def test_reader_rejects_broken_files(tmp_path) -> None:
    path = export_chakra(IRS.send_recv_ir(), tmp_path, nbytes=MiB)[0]
    data = path.read_bytes()
    (tmp_path / "cut.et").write_bytes(data[:-3])
    with pytest.raises(ChakraError, match="truncated"):
        read_chakra(tmp_path / "cut.et")
    (tmp_path / "empty.et").write_bytes(b"")
    with pytest.raises(ChakraError, match="empty"):
        read_chakra(tmp_path / "empty.et")
    with pytest.raises(ChakraError, match="cannot read"):
        read_chakra(tmp_path / "missing.et")


def test_cli_export_chakra(cli_runner, tmp_path) -> None:
    xml = tmp_path / "ring8.xml"
    write_xml(IRS.ring_allreduce_ir(8), xml)
    out = tmp_path / "traces"
    result = cli_runner.invoke(main, ["export", "chakra", str(xml), "-o", str(out), "--size", "8MB"])
    assert result.exit_code == 0, result.output
    assert "wrote 8 Chakra ET files" in result.output
    assert sorted(p.name for p in out.iterdir()) == sorted(f"ring8.{r}.et" for r in range(8))
    _, nodes = read_chakra(out / "ring8.0.et")
    assert node_attrs(nodes[0])["comm_size"] == MiB
    bad = cli_runner.invoke(main, ["export", "chakra", str(tmp_path / "nope.xml"), "-o", str(out)])
    assert bad.exit_code == 2 and "Traceback" not in bad.output


def _library_irs():
    from collsynth.algorithms import LIBRARY
    from collsynth.compiler import compile_program
    from collsynth.topologies.library import fully_connected

    for name, entry in LIBRARY.items():
        topo = fully_connected(8)
        if entry.multi_node or name == "alltonext":
            from dataclasses import replace

            topo = replace(topo, machines=tuple(r // 4 for r in range(8)))
        params = {"channels": 2} if "channels" in entry.parameters else {}
        for proto in ("Simple", "LL"):
            yield name, compile_program(entry.builder(topo, protocol=proto, **params))


def test_comp_durations_are_what_the_simulator_charges(tmp_path) -> None:
    """Every COMP node of every library program carries the simulator's charge for that step over the whole tile
    loop, in whole microseconds rounded up (never 0 for a step with a cost), and exactly in ns."""
    from collsynth.core.costs import tiles
    from collsynth.sim import SimModel

    model = SimModel()
    checked = 0
    for name, ir in _library_irs():
        for nbytes in (64 * 1024, 64 * MiB):
            chunk_bytes = nbytes // ir.nchunksperloop
            ntiles = tiles(chunk_bytes, ir.proto)
            for path in export_chakra(ir, tmp_path / name, ir.name, nbytes=nbytes):
                _, nodes = read_chakra(path)
                for node in nodes:
                    if node.type != et.COMP_NODE:
                        continue
                    kind = node.name.split()[-1]
                    cnt = node_attrs(node)["tensor_size"] // chunk_bytes if kind != "nop" else 0
                    charged = 0.0 if kind == "nop" else model.local_step_us(kind, cnt, chunk_bytes, ntiles)
                    assert node.duration_micros == math.ceil(charged), (name, node.name)
                    assert node_attrs(node)["duration_nanos"] == round(charged * 1000)
                    assert kind == "nop" or node.duration_micros >= 1
                    checked += 1
    assert checked > 100


def test_simulator_charges_the_cost_table_over_the_tile_loop() -> None:
    from collsynth.sim import SimModel, simulate
    from collsynth.topologies.model import Topology

    size = 2 * MiB  # one Simple tile: the re (waiting on the cpy) runs after it
    model = SimModel()
    expected = sum(model.local_step_us(kind, 1, size, 1) for kind in ("cpy", "re"))
    time = simulate(IRS.local_ops_ir(), Topology("one", 1, ()), [size], model=model).rows[0].time_us
    assert time == pytest.approx(expected)
    assert model.local_step_us("re", 1, MiB, 1) - model.local_alpha_us == pytest.approx(
        1.5 * (model.local_step_us("cpy", 1, MiB, 1) - model.local_alpha_us))


def test_allgather_comm_size_is_the_per_rank_input(tmp_path) -> None:
    from collsynth.algorithms import LIBRARY
    from collsynth.compiler import compile_program
    from collsynth.topologies.library import fully_connected

    ir = compile_program(LIBRARY["ring_allgather"].builder(fully_connected(4)))
    metadata, _ = read_chakra(export_chakra(ir, tmp_path, "ag", nbytes=8 * MiB)[0])
    assert node_attrs(metadata)["comm_size"] == 2 * MiB  # ASTRA-sim: each rank's input, not the gathered 8 MiB


@pytest.mark.parametrize("node_id", [0, 1, 127, 128, 16383, 16384, 2**35])
@pytest.mark.parametrize("name", ["", "rcs tb3 s12 recv", "é" * 70])
@pytest.mark.parametrize("deps", [[], [0], [5, 127], [128, 16384, 2**40]])
def test_node_head_is_what_protobuf_writes(node_id, name, deps) -> None:
    # the exporter encodes a node's id, name and data_deps itself (for speed); protobuf is the reference
    assert node_head(node_id, name, deps) == et.Node(id=node_id, name=name, data_deps=deps).SerializeToString()
