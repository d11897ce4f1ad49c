"""Peephole passes on plan ops: packets reduced where they landed, adjacent reductions fused."""

from hypothesis import given
from hypothesis import strategies as st

from collsynth.algorithms import library_programs
from collsynth.compiler import compile_program
from collsynth.emit.mscclpp import ir_to_plan
from collsynth.emit.mscclpp_fuse import fuse_reductions, read_packets_in_place
from collsynth.runtime.plan import execute_plan
from collsynth.topologies.io import resolve_topology


def _re(dst, src, name="re"):
    return {"name": name, "src_buff": [{"type": "i", "index": dst, "size": 1}, {"type": "s", "index": src, "size": 1}],
            "dst_buff": [{"type": "i", "index": dst, "size": 1}]}


def test_one_phase_ll_reads_packets_in_place():
    program = dict(library_programs(resolve_topology("ndv4"), "allreduce"))["allpairs_allreduce_one_phase"]
    plan = ir_to_plan(compile_program(program, protocol="LL"))
    names = [op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]]
    assert "upkt" not in names and "repkt" in names
    assert execute_plan(plan).passed


def test_one_phase_ll_in_one_threadblock_reduces_all_peers_packets_in_one_op():
    from collsynth.algorithms.mscclpp import MSCCLPP_VARIANTS
    from collsynth.catalog.export_mscclpp import variant_plan

    variant = next(v for v in MSCCLPP_VARIANTS if v.name == "mscclpp_1pa_ll")
    plan = variant_plan(variant, resolve_topology("ndv4")).plan
    names = [op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]]
    assert "upkt" not in names and names.count("repkt") == 8
    assert all(len(op["src_buff"]) == 8 for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]
               if op["name"] == "repkt")
    assert execute_plan(plan).passed


def test_unpack_kept_when_its_slot_is_read_by_something_else():
    unpack = {"name": "upkt", "src_buff": [{"type": "s", "index": 5, "size": 1}],
              "dst_buff": [{"type": "s", "index": 0, "size": 1}]}
    copy = {"name": "copy", "src_buff": [{"type": "s", "index": 0, "size": 1}],
            "dst_buff": [{"type": "o", "index": 0, "size": 1}]}
    assert read_packets_in_place([[unpack, copy]]) == [[unpack, copy]]
    (ops,) = read_packets_in_place([[unpack, _re(0, 0)]])
    assert [op["name"] for op in ops] == ["repkt"] and ops[0]["src_buff"][1]["index"] == 5


@given(st.integers(1, 20))
def test_fusion_keeps_every_source_once_and_at_most_eight_per_op(n):
    fused = fuse_reductions([_re(0, k) for k in range(n)])
    sources = [b["index"] for op in fused for b in op["src_buff"][1:]]
    assert sources == list(range(n))
    assert all(len(op["src_buff"]) <= 8 for op in fused)
    assert len(fused) == -(-n // 7)


def test_no_fusion_across_destinations_or_kinds():
    ops = [_re(0, 1), _re(1, 2), _re(1, 3, "repkt")]
    assert fuse_reductions(ops) == ops
