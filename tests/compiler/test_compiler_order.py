"""Message order on the connections: it follows the critical-path priority schedule, not program order, so
programs written chunk by chunk (the usual MSCCLang style) still pipeline; receivers take messages in the
order they were sent; a connection whose greedy order its receiver cannot follow keeps program order."""

import pytest

from collsynth.algorithms import ring_allgather, ring_allreduce
from collsynth.collectives import make_collective
from collsynth.compiler import compile_program, order_messages, trace_to_dag
from collsynth.ir import MAX_STEPS_PER_TB, SENDING_TYPES
from collsynth.language import Buffer, ProgramBuilder
from collsynth.runtime import execute
from collsynth.sim import simulate
from collsynth.topologies import fully_connected, ring

N = 8


def small_message_time(ir, topology):
    """Simulated time (us) at 1 KB: latency-bound, so it counts the alpha terms on the critical path."""
    return simulate(ir, topology, [1024]).rows[0].time_us


def alpha(topology):
    (value,) = {link.alpha_us for link in topology.link_list}
    return value


def first_steps(ir):
    """Per GPU, the first step of the threadblock that sends (a ring has one per GPU)."""
    firsts = []
    for gpu in ir.gpus:
        (sender,) = [tb for tb in gpu.tbs if tb.send >= 0]
        firsts.append(sender.steps[0].type)
    return firsts


def assert_runs(ir, program):
    result = execute(ir, backend="cpu", nbytes=program.collective.input_chunks * 16)
    assert result.passed, result.message


@pytest.mark.parametrize("topology", [fully_connected(N), ring(N)], ids=["fully_connected", "ring"])
def test_chunk_major_ring_allreduce_pipelines(topology):
    program = ring_allreduce(topology)  # written chunk by chunk: for chunk, for hop
    ir = compile_program(program)
    assert_runs(ir, program)
    assert first_steps(ir) == ["s"] * N  # every rank sends its own chunk first, nobody waits for a whole lap
    ideal = 2 * (N - 1) * alpha(topology)  # reduce-scatter then all-gather, one hop per step
    assert small_message_time(ir, topology) <= 1.1 * ideal


@pytest.mark.parametrize("topology", [fully_connected(N), ring(N)], ids=["fully_connected", "ring"])
def test_chunk_major_ring_allgather_pipelines(topology):
    program = ring_allgather(topology)
    ir = compile_program(program)
    assert_runs(ir, program)
    assert first_steps(ir) == ["s"] * N
    assert small_message_time(ir, topology) <= 1.1 * (N - 1) * alpha(topology)


def dsl_ring_allreduce(n, fusion=True):
    """Ring AllReduce written chunk-major in the DSL, the order MSCCLang users write it in."""
    b = ProgramBuilder("chunk_major", ring(n), make_collective("allreduce", n, 1, inplace=True),
                       instr_fusion=fusion)
    for c in range(n):
        acc = b.chunk(c, Buffer.input, c)
        for hop in range(1, n):
            acc = b.chunk((c + hop) % n, Buffer.input, c).reduce(acc)
        for hop in range(1, n):
            acc = acc.copy((c + n - 1 + hop) % n, Buffer.input, c)
    return b.build()


@pytest.mark.parametrize("fusion", [True, False])
def test_connections_queue_messages_by_priority_and_receivers_follow(fusion):
    program = dsl_ring_allreduce(4, fusion)
    dag = order_messages(trace_to_dag(program))
    # rank 0 -> rank 1 carries chunk 0 first (rank 0 starts it), then chunks 3, 2, 1 as they come round,
    # each at its own depth: not the program's 0, 1, 2, 3
    sends = [i for i, ins in enumerate(dag.instrs) if ins.kind == "s" and ins.rank == 0 and ins.send_peer == 1]
    assert [dag.instrs[i].src_off for i in sends][:4] == [0, 3, 2, 1]
    for prev, nxt in zip(sends, sends[1:], strict=False):  # queued in that order on both ends
        a, b = dag.instrs[prev], dag.instrs[nxt]
        assert prev in b.after and a.send_to in dag.instrs[b.send_to].after
    ir = compile_program(program)
    assert_runs(ir, program)
    assert first_steps(ir) == ["s"] * 4
    assert small_message_time(ir, ring(4)) <= 1.1 * 2 * 3 * alpha(ring(4))


def test_a_connection_whose_receiver_cannot_follow_keeps_program_order():
    # By priority, rank 0 would first send its input to rank 1's x (ready at once) and only then t (which
    # arrives from rank 2 first); but rank 1 must forward the t it receives before x is overwritten. On the
    # FIFO 0 -> 1 that order would deadlock: the connection keeps the program's order instead.
    b = ProgramBuilder("overwrite", fully_connected(3), make_collective("allgather", 3))
    b.chunk(2, Buffer.input, 0).copy(0, "t", 0)
    b.chunk(0, "t", 0).copy(1, "x", 0)
    b.chunk(1, "x", 0).copy(2, Buffer.output, 0)
    b.chunk(0, Buffer.input, 0).copy(1, "x", 0)
    program = b.build()
    dag = order_messages(trace_to_dag(program))
    sends = [ins.src_buf for ins in dag.instrs if ins.kind == "s" and ins.rank == 0]
    assert sends == ["t", "input"]
    ir = compile_program(program)
    result = execute(ir, backend="cpu", nbytes=3 * 8, postcondition=False)
    assert result.passed, result.message
    (sender,) = [tb for tb in ir.gpus[0].tbs if tb.send == 1]
    assert [(step.srcbuf, step.type in SENDING_TYPES) for step in sender.steps] == [("s", True), ("i", True)]


def test_128_rank_chunk_major_ring_fits_the_step_limit():
    topology = fully_connected(128)
    ir = compile_program(ring_allreduce(topology))
    assert max(len(tb.steps) for gpu in ir.gpus for tb in gpu.tbs) <= MAX_STEPS_PER_TB
    assert first_steps(ir) == ["s"] * 128
