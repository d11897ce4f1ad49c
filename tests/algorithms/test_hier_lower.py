"""Coalesced lowering of hierarchical compositions: fewer ops, the same data movement (the reference
interpreter passes the compiled IR), and faster at small sizes in simulation than the per-chunk lowering."""

from __future__ import annotations

from dataclasses import replace

import pytest

from collsynth.algorithms.hier_lower import GATEWAY_TRANSPOSES, coalesce_transfers, lower_composition, lower_gateway
from collsynth.collectives import make_collective
from collsynth.compiler.pipeline import compile_program
from collsynth.language.lower import LoweringError, lower_to_program
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


def _gateway(topo_name: str):  # type: ignore[no-untyped-def]
    topo = builtin(topo_name)
    found = hierarchical(topo, make_collective("alltoall", topo.num_ranks), 1 << 10, sources=["direct"]).algorithms
    return topo, next(a for a in found if a.provenance["plan"] == "gateway")


@pytest.mark.parametrize("transpose", GATEWAY_TRANSPOSES)
def test_gateway_program_passes_the_interpreter_compiled_for_msccl_executor(transpose: str) -> None:
    _, algorithm = _gateway("4xndv4")
    program = lower_gateway(algorithm, transpose=transpose)
    verdict = execute(compile_program(program, "msccl-executor"), "cpu")
    assert verdict.passed, verdict.message


def test_gateway_program_sends_one_message_per_gpu_and_node_pair_and_runs_faster_at_small_sizes() -> None:
    topo, algorithm = _gateway("4xndv4")
    program = lower_gateway(algorithm)
    remote = [op for op in program.ops if topo.machines[op.src.rank] != topo.machines[op.dst.rank]]
    assert len(remote) == 4 * 3  # one bulk per ordered node pair
    gpus, pairs = 8, 4 * 3
    intra = [op for op in program.ops if op.src.rank != op.dst.rank and op not in remote]
    # each GPU hands each pair's gateway one block and gets one; the rest is the node's direct exchange
    assert len(intra) <= 2 * gpus * pairs + 4 * gpus * (gpus - 1)
    size = [1 << 10]
    merged = simulate(replace(compile_program(lower_composition(algorithm), "msccl-executor"), proto="LL"), topo, size)
    ours = simulate(replace(compile_program(program, "msccl-executor"), proto="LL"), topo, size)
    assert ours.rows[0].time_us < merged.rows[0].time_us


def test_only_the_gateway_composition_has_a_gateway_program() -> None:
    topo = builtin("2xndv4")
    [algorithm, *_] = hierarchical(topo, make_collective("allreduce", 16), 1 << 10, sources=["direct"]).algorithms
    with pytest.raises(LoweringError, match="not the gateway composition"):
        lower_gateway(algorithm)
    with pytest.raises(LoweringError, match="transpose must be one of"):
        lower_gateway(_gateway("2xndv4")[1], transpose="both")
