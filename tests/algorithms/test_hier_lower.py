"""Coalesced lowering of hierarchical compositions: fewer ops, the same data movement (the reference
interpreter passes the compiled IR), and faster at small sizes in simulation than the per-chunk lowering."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collsynth.algorithms.hier_lower import coalesce_transfers, lower_composition
from collsynth.collectives import make_collective
from collsynth.compiler.pipeline import compile_program
from collsynth.language.lower import lower_to_program
from collsynth.language.program import COPY, ChunkOp, Slot
from collsynth.runtime import execute
from collsynth.sim.simulate import simulate
from collsynth.synth.cluster.hierarchical import hierarchical
from collsynth.topologies import builtin


@pytest.mark.parametrize("name", ["allreduce", "alltoall", "allgather"])
def test_coalesced_compositions_pass_the_interpreter(name: str) -> None:
    topo = builtin("2xndv4")
    inplace = name == "allreduce"
    for algorithm in hierarchical(topo, make_collective(name, 16), 1 << 20, sources=["direct"]).algorithms:
        plain = lower_to_program(algorithm, inplace=inplace)
        merged = lower_composition(algorithm, inplace=inplace)
        assert len(merged.ops) <= len(plain.ops)
        assert sum(op.src.count for op in merged.ops) == sum(op.src.count for op in plain.ops)
        verdict = execute(compile_program(merged), "cpu")
        assert verdict.passed, verdict.message
        if name == "alltoall":  # the gateway's bulk as one staged message
            staged = compile_program(lower_composition(algorithm, merge="stage"), "msccl-executor")
            verdict = execute(staged, "cpu")
            assert verdict.passed, verdict.message


def test_allreduce_blocks_travel_as_one_message_and_run_faster() -> None:
    topo = builtin("2xndv4")
    [algorithm] = hierarchical(topo, make_collective("allreduce", 16), 1 << 10, sources=["direct"]).algorithms
    plain = compile_program(lower_to_program(algorithm, inplace=True))
    merged = compile_program(lower_composition(algorithm, inplace=True))
    sizes = [1 << 10, 1 << 20]
    before = [row.time_us for row in simulate(plain, topo, sizes).rows]
    after = [row.time_us for row in simulate(merged, topo, sizes).rows]
    assert all(a < b for a, b in zip(after, before, strict=True))


def test_only_adjacent_transfers_on_one_link_merge() -> None:
    program = lower_to_program(hierarchical(builtin("2xndv4"), make_collective("allgather", 16), 1 << 10,
                                            sources=["direct"]).algorithms[0])
    a = ChunkOp(COPY, Slot(0, "input", 0), Slot(1, "output", 0))
    b = ChunkOp(COPY, Slot(0, "input", 1), Slot(1, "output", 1))
    gap = ChunkOp(COPY, Slot(0, "input", 3), Slot(1, "output", 2))
    other = ChunkOp(COPY, Slot(0, "input", 2), Slot(2, "output", 2))
    local = ChunkOp(COPY, Slot(1, "input", 0), Slot(1, "output", 5))
    local2 = ChunkOp(COPY, Slot(1, "input", 1), Slot(1, "output", 6))
    ops = coalesce_transfers(replace(program, ops=(a, b, gap, other, local, local2))).ops
    assert [(op.src.index, op.src.count, op.dst.rank) for op in ops] == [(0, 2, 1), (3, 1, 1), (2, 1, 2), (0, 1, 1),
                                                                        (1, 1, 1)]
