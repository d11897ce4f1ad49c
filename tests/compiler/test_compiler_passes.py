"""The compiler passes one by one, and what they must refuse."""

import pytest

from collsynth.collectives import make_collective
from collsynth.compiler import (
    CompileError,
    aggregate_contiguous,
    assign_channels,
    assign_threadblocks,
    check_ir,
    compile_program,
    fuse_instructions,
    insert_dependencies,
    insert_nops,
    instance_collective,
    prune_dependencies,
    replicate_instances,
    schedule,
    trace_to_dag,
)
from collsynth.ir import MAX_COUNT, Algo, Gpu, Step, Threadblock
from collsynth.language import Buffer, ProgramBuilder
from collsynth.runtime import execute
from collsynth.topologies import fully_connected, ring


def run(program, postcondition=True, **options):
    """Compile and execute; the IR must run (and pass the collective's postcondition)."""
    ir = compile_program(program, **options)
    instances = options.get("instances", program.instances)
    coll = instance_collective(program.collective, instances)
    result = execute(ir, backend="cpu", nbytes=coll.input_chunks * 8, collective=coll, postcondition=postcondition)
    assert result.passed, f"{result}\n{ir}"
    return ir


def steps_of(ir):
    return [(gpu.id, tb, step) for gpu in ir.gpus for tb in gpu.tbs for step in tb.steps]


def ring_allreduce(n, **kw):
    b = ProgramBuilder("ring_ar", ring(n), make_collective("allreduce", n), **kw)
    for c in range(n):
        acc = b.chunk(c, Buffer.input, c)
        for hop in range(1, n):
            acc = b.chunk((c + hop) % n, Buffer.input, c).reduce(acc)
        for hop in range(1, n):
            acc = acc.copy((c + n - 1 + hop) % n, Buffer.input, c)
        for r in range(n):
            b.chunk(r, Buffer.input, c).copy(r, Buffer.output, c)
    return b.build()


def test_trace_finds_raw_war_waw_and_connection_order():
    b = ProgramBuilder("deps", fully_connected(3), make_collective("allgather", 3))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)  # 0: s@0  1: r@1
    b.chunk(1, Buffer.output, 0).copy(2, Buffer.output, 0)  # 2: s@1 reads what 1 wrote (RAW)  3: r@2
    b.chunk(2, Buffer.input, 0).copy(1, Buffer.output, 0)  # 4: s@2  5: r@1 overwrites what 2 read (WAR)
    b.chunk(2, Buffer.input, 0).copy(1, Buffer.output, 2)  # 6: s@2  7: r@1
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 2)  # 8: s@0  9: r@1 overwrites 7's unread write (WAW)
    dag = trace_to_dag(b.build())
    assert [ins.kind for ins in dag.instrs] == ["s", "r"] * 5
    preds, after = [ins.preds for ins in dag.instrs], [ins.after for ins in dag.instrs]
    assert preds[2] == (1,) and preds[5] == (2,) and preds[9] == (7,)
    assert [ins.send_to for ins in dag.instrs][::2] == [1, 3, 5, 7, 9]
    # messages between the same two ranks queue in program order, on both ends
    assert after[6] == (4,) and after[7] == (5,) and after[8] == (0,) and after[9] == (1,)
    assert "=> 1" in str(dag) and "queued after 4" in str(dag)


def test_fusion_gives_rcs_rrs_rrcs_and_keeps_results():
    program = ring_allreduce(4)
    fused = run(program)
    plain = run(program, instr_fusion=False)
    kinds = {step.type for _, _, step in steps_of(fused)}
    assert {"rcs", "rrs", "rrcs"} <= kinds
    assert {step.type for _, _, step in steps_of(plain)} <= {"s", "r", "rrc", "cpy"}
    assert fused.num_steps < plain.num_steps


def test_reduce_steps_use_the_receivers_own_slot():
    # chunk 1 of rank 0 is added into chunk 0 of rank 1: the local operand is rank 1's slot 0
    b = ProgramBuilder("xidx", fully_connected(2), make_collective("allreduce", 2))
    b.chunk(1, Buffer.input, 0).reduce(b.chunk(0, Buffer.input, 1))
    ir = compile_program(b.build())
    (rrc,) = [step for gpu, _, step in steps_of(ir) if step.type == "rrc"]
    assert (rrc.srcbuf, rrc.srcoff, rrc.dstbuf, rrc.dstoff) == ("i", 0, "i", 0)
    (send,) = [step for gpu, _, step in steps_of(ir) if step.type == "s"]
    assert (send.srcbuf, send.srcoff) == ("i", 1)


def test_aggregation_merges_contiguous_messages_up_to_the_count_limit():
    n, chunks = 3, 2
    b = ProgramBuilder("a2a", fully_connected(n), make_collective("alltoall", n, chunks))
    for s in range(n):
        for d in range(n):
            for i in range(chunks):
                b.chunk(s, Buffer.input, d * chunks + i).copy(d, Buffer.output, s * chunks + i)
    program = b.build()
    merged, single = run(program), run(program, aggregate=False)
    assert {step.cnt for _, _, step in steps_of(merged) if step.type in ("s", "r", "cpy")} == {2}
    assert {step.cnt for _, _, step in steps_of(single)} == {1}

    big = ProgramBuilder("big", fully_connected(2), make_collective("allgather", 2, 80))
    for i in range(80):
        big.chunk(0, Buffer.input, i).copy(1, Buffer.output, i)
    counts = sorted(step.cnt for _, _, step in steps_of(compile_program(big.build())) if step.type == "s")
    assert counts == [80 - MAX_COUNT, MAX_COUNT]


def test_aggregation_keeps_io_chunks_apart_under_interleaved_instances():
    b = ProgramBuilder("ag", fully_connected(2), make_collective("allgather", 2, 2))
    for i in range(2):
        b.chunk(0, Buffer.input, i).copy(1, Buffer.output, i)
    ir = run(b.build(), False, instances=2)
    assert {step.cnt for _, _, step in steps_of(ir)} == {1}
    batched = run(b.build(), False, instances=2, interleaved_replication=False)
    assert {step.cnt for _, _, step in steps_of(batched)} == {2}


def test_fused_chains_pair_peers_consistently_per_channel():
    # rank 1 forwards one chunk from rank 0 to rank 2 and another from rank 0 to rank 3: two fused
    # chains that need two channels (a channel pairs rank 1's receive peer with one send peer)
    b = ProgramBuilder("fan", fully_connected(4), make_collective("allgather", 4, 2))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0).copy(2, Buffer.output, 0)
    b.chunk(0, Buffer.input, 1).copy(1, Buffer.output, 1).copy(3, Buffer.output, 1)
    dag = fuse_instructions(trace_to_dag(b.build()))
    channelled = assign_channels(dag)
    rcs = [i for i, ins in enumerate(channelled.dag.instrs) if ins.kind == "rcs"]
    assert len(rcs) == 2 and {channelled.channel[i] for i in rcs} == {0, 1}
    ir = compile_program(b.build(), aggregate=False)  # (aggregated, rank 0 sends both chunks in one step)
    tbs = sorted((tb.send, tb.recv, tb.chan) for tb in ir.gpus[1].tbs)
    assert tbs == [(2, 0, 0), (3, 0, 1)]
    run(b.build(), False, aggregate=False)


def test_manual_threadblocks_are_checked_with_the_line():
    b = ProgramBuilder("m", fully_connected(3), make_collective("allgather", 3), threadblock_policy="manual")
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, sendtb=0, recvtb=0)
    b.chunk(0, Buffer.input, 0).copy(2, Buffer.output, 0, sendtb=0, recvtb=0)  # tb 0 of rank 0 sends to 1 already
    with pytest.raises(CompileError, match=r"test_compiler_passes.py:\d+: threadblock 0 of rank 0 already sends to "
                                           r"rank 1; an op sending to rank 2 cannot join it"):
        compile_program(b.build())
    # the same hints are ignored under the automatic policy
    run(b.build(), False, threadblock_policy="auto")


def test_dependencies_become_nops_and_hasdep():
    # rank 2 adds two chunks that arrive on two other threadblocks: the reduce waits for both
    b = ProgramBuilder("nop", fully_connected(3), make_collective("allreduce", 3), threadblock_policy="manual")
    x = b.chunk(0, Buffer.input, 2).copy(2, "x", 0, sendtb=0, recvtb=0)
    y = b.chunk(1, Buffer.input, 2).copy(2, "y", 0, sendtb=0, recvtb=1)
    y.reduce(x, sendtb=2)
    placed = assign_threadblocks(schedule(assign_channels(trace_to_dag(b.build()))), "manual")
    deps = prune_dependencies(insert_dependencies(placed))
    reduce_instr = next(i for i, ins in enumerate(placed.dag.instrs) if ins.kind == "re")
    assert len(deps.waits_of(reduce_instr)) == 2
    tbprog = insert_nops(replicate_instances(deps, b.build()))
    gpu2 = tbprog.gpus[2]
    (tb,) = [tb for tb in gpu2 if any(s.type == "re" for s in tb.steps)]
    k = next(k for k, s in enumerate(tb.steps) if s.type == "re")
    assert tb.steps[k - 1].type == "nop" and len(tb.steps[k - 1].deps) == 1 and len(tb.steps[k].deps) == 1
    waited = {dep for t in gpu2 for s in t.steps for dep in s.deps}
    assert all(gpu2[t].steps[s].hasdep and gpu2[t].steps[s].type != "nop" for t, s in waited)
    run(b.build(), False)


def test_prune_drops_waits_an_earlier_step_covers():
    b = ProgramBuilder("prune", fully_connected(2), make_collective("allgather", 2, 2))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
    b.chunk(1, Buffer.output, 0).copy(1, Buffer.output, 2)  # local copies on rank 1 wait for the receive
    b.chunk(1, Buffer.output, 0).copy(1, Buffer.output, 3)
    program = b.build()
    placed = assign_threadblocks(schedule(assign_channels(trace_to_dag(program))))
    before = insert_dependencies(placed)
    after = prune_dependencies(before)
    assert after.count <= before.count
    run(program, False, aggregate=False)


@pytest.mark.parametrize("interleaved", [True, False])
def test_instances_replicate_channels_and_offsets(interleaved):
    n, copies = 4, 3
    b = ProgramBuilder("ag", ring(n), make_collective("allgather", n))
    for r in range(n):
        c = b.chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        for hop in range(1, n):
            c = c.copy((r + hop) % n, Buffer.output, r)
    plain = {"aggregate": False, "instr_fusion": False}
    one = compile_program(b.build(), **plain)
    many = compile_program(b.build(), instances=copies, interleaved_replication=interleaved, **plain)
    assert many.nchannels == copies * one.nchannels
    assert len(many.gpus[0].tbs) == copies * len(one.gpus[0].tbs)
    assert many.nchunksperloop == copies * one.nchunksperloop
    offsets = sorted(step.dstoff for tb in many.gpus[1].tbs for step in tb.steps if step.type in ("r", "rcs"))
    if interleaved:  # chunk j of instance k at j * copies + k
        assert offsets == sorted(j * copies + k for j in (0, 2, 3) for k in range(copies))
    else:  # batched: instance k's buffer after the others
        assert offsets == sorted(n * k + j for j in (0, 2, 3) for k in range(copies))
    if interleaved:
        run(b.build(), instances=copies)


def test_runtime_limits_are_refused_with_the_line():
    b = ProgramBuilder("cnt", fully_connected(2), make_collective("allgather", 2, 80))
    b.chunk(0, Buffer.input, 0, 80).copy(1, Buffer.output, 0)  # marker: 80 chunks in one step
    with pytest.raises(CompileError, match=r"test_compiler_passes.py:\d+: a step moves 80 chunks; MSCCL moves at most "
                                           r"71 per step"):
        compile_program(b.build())

    b = ProgramBuilder("steps", fully_connected(2), make_collective("allgather", 2, 300))
    for i in range(300):
        b.chunk(0, Buffer.input, i).copy(1, Buffer.output, i)
    with pytest.raises(CompileError, match=r"rank 0 threadblock 0 \(send 1, recv -1, channel 0\) needs 300 steps; "
                                           "MSCCL runs at most 256"):
        compile_program(b.build(), aggregate=False)
    compile_program(b.build())  # aggregated, it fits

    b = ProgramBuilder("chan", fully_connected(2), make_collective("allgather", 2))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, ch=40)
    with pytest.raises(CompileError, match=r":\d+: rank 0 threadblock 0 uses channel 40; MSCCL has channels 0..31"):
        compile_program(b.build())
    b = ProgramBuilder("inst", fully_connected(2), make_collective("allgather", 2))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, ch=1)
    with pytest.raises(CompileError, match="channels per instance x instances"):
        compile_program(b.build(), instances=17)


def _algo(tbs0, tbs1):
    return Algo("hand", "allgather", "Simple", 1, 2, 2, False,
                (Gpu(0, 1, 2, 0, tuple(tbs0)), Gpu(1, 1, 2, 0, tuple(tbs1))))


def test_check_ir_finds_cycles_and_connection_mismatches():
    # rank 0 waits for its receive before sending, rank 1 likewise: each waits for the other
    cycle = _algo(
        [Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 1, 0),)),
         Threadblock(1, -1, 1, 0, (Step(0, "r", "o", 1, "o", 1, 1, -1, -1, True),))],
        [Threadblock(0, 0, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 1, 0),)),
         Threadblock(1, -1, 0, 0, (Step(0, "r", "o", 0, "o", 0, 1, -1, -1, True),))])
    with pytest.raises(CompileError, match="dependency cycle: rank 0 threadblock 0 step 0 can never run"):
        check_ir(cycle)
    sizes = _algo([Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1),))],
                  [Threadblock(0, -1, 0, 0, (Step(0, "r", "o", 0, "o", 0, 2),))])
    with pytest.raises(CompileError, match="message 0 is sent with 1 chunks but received as 2"):
        check_ir(sizes)
    missing = _algo([Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1),) * 2)],
                    [Threadblock(0, -1, 0, 0, (Step(0, "r", "o", 0, "o", 0, 1),))])
    with pytest.raises(CompileError, match="2 sends but 1 receives"):
        check_ir(missing)


def test_every_intermediate_form_prints():
    program = ring_allreduce(3)
    dag = fuse_instructions(aggregate_contiguous(trace_to_dag(program)))
    cdag = assign_channels(dag)
    sched = schedule(cdag)
    placed = assign_threadblocks(sched)
    deps = prune_dependencies(insert_dependencies(placed))
    tbprog = insert_nops(replicate_instances(deps, program))
    for form, marker in ((dag, "instruction DAG"), (cdag, "channels assigned"), (sched, "schedule of"),
                         (placed, "threadblocks"), (deps, "dependencies"), (tbprog, "threadblock program")):
        text = str(form)
        assert text.startswith(marker) and len(text.splitlines()) > 3


def test_unknown_option_is_refused():
    with pytest.raises(CompileError, match="unknown compiler option"):
        compile_program(ring_allreduce(3), fusion=False)
