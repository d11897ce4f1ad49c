"""Instances under interleaved replication: a step of `count` chunks is replicated as blocks of `count`
parts, so transfers of different sizes over the same chunks overlap across instances. The compiler must
order those overlaps (waits across instances) and keep every part where the program says, including
through scratch buffers; the IR must be free of data races."""

import pytest
from compiler_helpers import races

from collsynth.collectives import make_collective
from collsynth.compiler import (
    assign_channels,
    assign_threadblocks,
    compile_program,
    cross_instance_waits,
    instance_collective,
    schedule,
    trace_to_dag,
)
from collsynth.language import Buffer, ProgramBuilder
from collsynth.runtime import execute
from collsynth.topologies import fully_connected, ring


def run(program, instances, **options):
    ir = compile_program(program, instances=instances, **options)
    coll = instance_collective(program.collective, instances)
    result = execute(ir, backend="cpu", nbytes=coll.input_chunks * 16, collective=coll)
    assert result.passed, f"{result.message}\n{ir}"
    assert races(ir) == []
    return ir


def mixed_sizes():
    """Rank 0 sends its two chunks to rank 1 in one 2-chunk transfer; rank 1 forwards the second chunk
    alone. Instance 1 of the 2-chunk receive writes part 0 of chunk 1, which instance 0 of the forward
    reads."""
    b = ProgramBuilder("mixed", fully_connected(2), make_collective("allgather", 2, 2))
    b.chunk(0, Buffer.input, 0, 2).copy(1, Buffer.output, 0)
    b.chunk(1, Buffer.output, 1).copy(0, Buffer.output, 1)
    b.chunk(0, Buffer.input, 0).copy(0, Buffer.output, 0)
    b.chunk(1, Buffer.input, 0, 2).copy(0, Buffer.output, 2)
    b.chunk(1, Buffer.input, 0, 2).copy(1, Buffer.output, 2)
    return b.build()


@pytest.mark.parametrize("instances", [2, 3])
def test_transfers_of_different_sizes_wait_across_instances(instances):
    ir = run(mixed_sizes(), instances)
    # rank 1: the forward of instance 0 (1 chunk, part 0 of chunk 1) waits for the receive of instance 1,
    # a threadblock on another channel
    gpu1 = ir.gpus[1]
    assert any(step.depid >= 0 and gpu1.tbs[step.depid].chan != tb.chan for tb in gpu1.tbs for step in tb.steps)


def test_single_chunk_programs_need_no_waits_across_instances():
    b = ProgramBuilder("ag", ring(4), make_collective("allgather", 4))
    for r in range(4):
        c = b.chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        for hop in range(1, 4):
            c = c.copy((r + hop) % 4, Buffer.output, r)
    program = b.build()
    placed = assign_threadblocks(schedule(assign_channels(trace_to_dag(program))))
    assert cross_instance_waits(placed, 3) == {}
    assert cross_instance_waits(assign_threadblocks(schedule(assign_channels(trace_to_dag(mixed_sizes())))), 2)
    run(program, 3)


def allpairs_through_scratch(n):
    """MSCCLang's all-pairs AllReduce shape: n-chunk transfers from input into scratch, single-chunk
    reductions out of scratch, n-chunk transfers of the sums back."""
    b = ProgramBuilder("allpairs", fully_connected(n), make_collective("allreduce", n, n, inplace=True))
    for owner in range(n):
        for peer in range(n):
            if peer != owner:
                b.chunk(peer, Buffer.input, owner * n, n).copy(owner, "gathered", (peer - (peer > owner)) * n)
    for owner in range(n):
        for k in range(n * (n - 1)):
            b.chunk(owner, Buffer.input, owner * n + k % n).reduce(b.chunk(owner, "gathered", k))
    for owner in range(n):
        for peer in range(n):
            if peer != owner:
                b.chunk(owner, Buffer.input, owner * n, n).copy(peer, Buffer.input, owner * n)
    return b.build()


def two_step_alltoall(nodes, gpus):
    """AllToAll in two steps: gather per (GPU, remote node) into scratch in single blocks, then one
    transfer of all of them to the remote GPU's output."""
    n = nodes * gpus
    b = ProgramBuilder("two_step", fully_connected(n), make_collective("alltoall", n))
    for m in range(nodes):
        for remote in range(nodes):
            if remote == m:
                continue
            for g in range(gpus):
                dst = remote * gpus + g
                for src_g in range(gpus):
                    b.chunk(m * gpus + src_g, Buffer.input, dst).copy(m * gpus + g, f"to{remote}", src_g)
                b.chunk(m * gpus + g, f"to{remote}", 0, gpus).copy(dst, Buffer.output, m * gpus, ch=1)
        for src in range(m * gpus, (m + 1) * gpus):
            for dst in range(m * gpus, (m + 1) * gpus):
                b.chunk(src, Buffer.input, dst).copy(dst, Buffer.output, src)
    return b.build()


@pytest.mark.parametrize("instances", [2, 3])
@pytest.mark.parametrize("aggregate", [True, False])
def test_multi_chunk_transfers_between_scratch_and_io_keep_every_part_in_place(instances, aggregate):
    # with scratch batched (MSCCLang's layout), both programs gave wrong results with instances > 1
    run(allpairs_through_scratch(3), instances, aggregate=aggregate)
    run(two_step_alltoall(2, 2), instances, aggregate=aggregate)


def instance_of(ir, instances, chan):
    return chan // (ir.nchannels // instances)


def test_batched_replication_keeps_instances_apart():
    ir = run(allpairs_through_scratch(3), 2, interleaved_replication=False)
    waits = [(tb, gpu.tbs[step.depid]) for gpu in ir.gpus for tb in gpu.tbs for step in tb.steps if step.depid >= 0]
    assert waits and all(instance_of(ir, 2, a.chan) == instance_of(ir, 2, b.chan) for a, b in waits)
    placed = assign_threadblocks(schedule(assign_channels(trace_to_dag(allpairs_through_scratch(3)))))
    assert cross_instance_waits(placed, 2, interleaved=False) == {}
