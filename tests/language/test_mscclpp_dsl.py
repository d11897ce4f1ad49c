"""MSCCLang's MSCCL++ half (MSCCLPPProgram, put/get/signal/wait/flush, packets, Json()) on collsynth's face:
programs written in MSCCLang's MSCCL++ style (our own), lowered to an execution plan and run in the plan
interpreter, which also judges synchronization (a read before the matching wait is a race)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.emit.mscclpp_schema import check_plan
from collsynth.language import (
    Buffer,
    ChannelType,
    Check,
    Json,
    MSCCLPPProgram,
    ProgramError,
    ReplicationPolicy,
    chunk,
    rank,
)
from collsynth.language.collectives import AllGather, AllReduce, ReduceScatter
from collsynth.runtime.plan import execute_plan
from collsynth.topologies import distributed, fully_connected, ring


def allgather_put_signal(n: int, chan: ChannelType = ChannelType.sm, wait: bool = True) -> None:
    """Every rank puts its chunk to every peer's output and signals; each rank waits for every peer."""
    for r in range(n):
        c = chunk(r, Buffer.input, 0)
        c.copy(r, Buffer.output, r, sendtb=0)
        for p in range(n):
            if p != r:
                c.put(p, Buffer.output, r, sendtb=p, chan_type=chan)
                c.signal(p, Buffer.output, r, sendtb=p, chan_type=chan)
                if chan is ChannelType.proxy:
                    c.flush(p, Buffer.output, r, sendtb=p)
    if wait:
        for r in range(n):
            for p in range(n):
                if p != r:
                    chunk(r, Buffer.output, p).wait(p, Buffer.input, 0, recvtb=r, chan_type=chan)


def test_allgather_with_put_signal_wait_passes_the_plan_interpreter(capsys: pytest.CaptureFixture[str]) -> None:
    with MSCCLPPProgram("ag_pairs", fully_connected(4), AllGather(4, 1, False), 1) as prog:
        allgather_put_signal(4)
        assert Check()
        Json()
        plan = json.loads(capsys.readouterr().out)
    check_plan(plan)
    assert execute_plan(plan, collective=prog.spec).passed
    ops = [op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]]
    assert "pws" in ops and "put" not in ops  # put + signal on one channel fused, as MSCCLang's optimizer does


@pytest.mark.parametrize("wait", [True, False])
def test_reading_a_put_before_its_wait_is_a_race(wait: bool, capsys: pytest.CaptureFixture[str]) -> None:
    """Chunks land in the peer's scratch; the peer copies them to its output. Without the wait the copy reads
    data nothing ordered: MSCCLang's traced chunks are right either way, the plan interpreter tells them apart."""
    n = 3
    with MSCCLPPProgram("ag_scratch", fully_connected(n), AllGather(n, 1, False), 1):
        for r in range(n):
            c = chunk(r, Buffer.input, 0)
            c.copy(r, Buffer.output, r, sendtb=0)
            for p in range(n):
                if p != r:
                    c.put(p, "scratch", r, sendtb=0)
                    c.signal(p, "scratch", r, sendtb=0)
        for r in range(n):
            for p in range(n):
                if p != r:
                    landed = chunk(r, "scratch", p)
                    if wait:
                        landed.wait(p, Buffer.input, 0, recvtb=0)
                    landed.copy(r, Buffer.output, p, sendtb=0)
        assert Check() is wait
        if not wait:
            out = capsys.readouterr().out
            assert "race" in out or "unwritten-read" in out  # read before the put landed, or unordered
            with pytest.raises(ProgramError, match="plan interpreter"):
                Json()


def test_mismatched_threadblocks_deadlock() -> None:
    """Channels pair in threadblock order: rank a's k-th threadblock that talks to b meets b's k-th. Here each
    rank signals on its first (tb 1) and waits on its second (tb 2), whose partner never signals."""
    with MSCCLPPProgram("pairing", fully_connected(2), AllGather(2, 1, False), 1):
        for r in range(2):
            c = chunk(r, Buffer.input, 0)
            c.copy(r, Buffer.output, r)
            c.put(1 - r, Buffer.output, r, sendtb=1)
            c.signal(1 - r, Buffer.output, r, sendtb=1)
        for r in range(2):
            chunk(r, Buffer.output, 1 - r).wait(1 - r, Buffer.input, 0, recvtb=2)
        assert not Check()


def test_channels_pair_in_threadblock_order_and_barrier() -> None:
    """MSCCLang's barrier-separated AllGather style: rank n puts to peer p on threadblock p, all threadblocks meet
    at a barrier, then signal; rank n waits for peer p on threadblock p (not the sender's index n): the channel
    of the k-th threadblock pairs with the peer's k-th, as the executor pairs them."""
    n = 3
    with MSCCLPPProgram("ag_barrier", n, AllGather(n, 1, False), 2,
                        replication_policy=ReplicationPolicy.interleaved) as prog:
        for r in range(n):
            c = chunk(r, Buffer.input, 0)
            for p in range(n):
                if p != r:
                    c.put(p, Buffer.output, r, sendtb=p)
                else:
                    c.copy(r, Buffer.output, r, sendtb=p)
            rank(r).barrier(tb_list=list(range(n)))
            for p in range(n):
                if p != r:
                    c.signal(p, Buffer.output, r, sendtb=p)
        for r in range(n):
            for p in range(n):
                if p != r:
                    chunk(r, Buffer.output, p).wait(p, Buffer.input, 0, recvtb=p)
        assert Check()
        plan = prog.to_plan()
    barriers = [op for tb in plan["gpus"][0]["threadblocks"] for op in tb["ops"] if op["name"] == "barrier"]
    assert len(barriers) == n * 2 and {op["num_threadblocks"] for op in barriers} == {n}
    assert len({op["barrier_id"] for op in barriers}) == 2  # one device syncer per instance's threadblock set
    assert prog.topo.num_nodes() == n  # the rank count given instead of a topology: fully connected


def test_proxy_channels_across_machines_flush() -> None:
    topo = distributed.distributed_fully_connected(fully_connected(2), 2, 1)
    with MSCCLPPProgram("ag_proxy", topo, AllGather(4, 1, False), 1) as prog:
        allgather_put_signal(4, ChannelType.proxy)
        assert Check()
        plan = prog.to_plan()
    assert {op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]} >= {"pwsf"}
    assert all(ch["channel_type"] == "port" for gpu in plan["gpus"] for ch in gpu["channels"])


def allreduce_read_reduce(n: int, size: int, pull: bool = False) -> None:
    """In-place AllReduce, one threadblock per rank: rank r owns block r. Every rank tells every peer its input
    is ready; r waits, reads and reduces every peer's block r over the channel (rre), then hands the sum out:
    by put + signal (the peer waits), or, with `pull`, by signalling and the peer `get`ting it."""
    for r in range(n):
        for p in range(n):
            if p != r:
                chunk(r, Buffer.input, p * size, size).signal(p, Buffer.input, p * size, sendtb=0)
    for r in range(n):
        own = chunk(r, Buffer.input, r * size, size)
        for p in range(n):
            if p != r:
                own.wait(p, Buffer.input, r * size, recvtb=0)
                own.reduce(chunk(p, Buffer.input, r * size, size), recvtb=0)
    for r in range(n):
        own = chunk(r, Buffer.input, r * size, size)
        for p in range(n):
            if p != r and pull:
                own.signal(p, Buffer.input, r * size, sendtb=0)
            elif p != r:
                own.put(p, Buffer.input, r * size, sendtb=0)
                own.signal(p, Buffer.input, r * size, sendtb=0)
    for r in range(n):
        for p in range(n):
            if p != r:
                block = chunk(r, Buffer.input, p * size, size)
                block.wait(p, Buffer.input, p * size, recvtb=0)
                if pull:
                    block.get(p, Buffer.input, p * size, recvtb=0)


@pytest.mark.parametrize("instances,policy,pull", [(1, ReplicationPolicy.duplicated, False),
                                                   (1, ReplicationPolicy.duplicated, True),
                                                   (2, ReplicationPolicy.interleaved, False),
                                                   (2, ReplicationPolicy.duplicated, True)])
def test_inplace_allreduce_with_remote_reduce(instances: int, policy: ReplicationPolicy, pull: bool) -> None:
    n, size = 4, 2
    with MSCCLPPProgram("ar_rre", fully_connected(n), AllReduce(n, n * size, True), instances,
                        replication_policy=policy) as prog:
        allreduce_read_reduce(n, size, pull)
        assert Check()
        plan = prog.to_plan()
    names = {op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]}
    assert "rre" in names and ("get" in names) == pull and plan["inplace"] is True
    assert plan["gpus"][0]["input_chunks"] == n * size * instances
    assert len(plan["gpus"][0]["threadblocks"]) == instances


def test_reduce_before_the_peer_signals_is_caught() -> None:
    """Reading a peer's block before its signal arrived: the traced chunks are right, the plan is not."""
    n = 2
    with MSCCLPPProgram("ar_early", fully_connected(n), AllReduce(n, n, True), 1):
        for r in range(n):
            chunk(r, Buffer.input, r).reduce(chunk(1 - r, Buffer.input, r), recvtb=0)
        for r in range(n):
            chunk(r, Buffer.input, r).put(1 - r, Buffer.input, r, sendtb=0)
            chunk(r, Buffer.input, r).signal(1 - r, Buffer.input, r, sendtb=0)
        for r in range(n):
            chunk(r, Buffer.input, 1 - r).wait(1 - r, Buffer.input, 1 - r, recvtb=0)
        assert not Check()


def test_ll_packets_into_scratch_then_reduce_packet() -> None:
    """An LL ReduceScatter: every rank writes packets of the peer's block into the peer's scratch (no signal),
    the peer reduces the packets into its own block."""
    n = 3
    with MSCCLPPProgram("rs_ll", fully_connected(n), ReduceScatter(n, 1, False), 1, protocol="LL") as prog:
        for r in range(n):
            for p in range(n):
                if p != r:
                    chunk(r, Buffer.input, p).put_packet(p, "scratch", r, sendtb=p)
        for r in range(n):
            own = chunk(r, Buffer.input, r)
            for p in range(n):
                if p != r:
                    own.reduce_packet(chunk(r, "scratch", p), recvtb=0)
            own.copy(r, Buffer.output, 0, sendtb=0)
        assert Check()
        plan = prog.to_plan()
    names = {op["name"] for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]}
    assert {"ppkt", "repkt"} <= names and plan["use_double_scratch_buffer"]


def test_refusals() -> None:
    with MSCCLPPProgram("bad", ring(4), AllGather(4, 1, False), 1):
        c = chunk(0, Buffer.input, 0)
        with pytest.raises(ProgramError, match="no link"):
            c.put(2, Buffer.output, 0)
        with pytest.raises(ProgramError, match="same rank"):
            c.signal(0)
        with pytest.raises(ProgramError, match="inside rank"):
            c.copy(1, Buffer.output, 0)
        with pytest.raises(ProgramError, match="flush is for proxy"):
            c.flush(1, chan_type=ChannelType.sm)
        with pytest.raises(ProgramError, match="NVLS"):
            c.group_store([1])
        assert chunk(1, Buffer.output, 3) is None  # an empty slot, as MSCCLang answers
        with pytest.raises(ProgramError, match="already open"):
            MSCCLPPProgram("again", ring(4), AllGather(4, 1, False), 1).__enter__()
    with pytest.raises(ProgramError, match="protocol"):
        MSCCLPPProgram("ll128", ring(4), AllGather(4, 1, False), 1, protocol="LL128")
    with pytest.raises(ProgramError, match="packed"):
        MSCCLPPProgram("packed", ring(4), AllGather(4, 1, False), 2, replication_policy=ReplicationPolicy.packed)
    with pytest.raises(ProgramError, match="open program"):
        Json()


@settings(max_examples=25, deadline=None)
@given(st.integers(2, 4).flatmap(lambda n: st.tuples(
    st.just(n), st.lists(st.integers(0, 2), min_size=n * n, max_size=n * n), st.integers(1, 3), st.booleans())))
def test_any_threadblock_assignment_lowers_to_a_correct_plan(case) -> None:
    """Property of the lowering: an AllGather through scratch, where the put/signal from a to b and b's wait
    use one (random) threadblock index, passes the plan interpreter for any assignment, instance count (with
    interleaved replication) and fusion setting."""
    n, tbs, instances, fusion = case
    with MSCCLPPProgram("prop", fully_connected(n), AllGather(n, 1, False), instances,
                        replication_policy=ReplicationPolicy.interleaved, instr_fusion=fusion) as prog:
        for r in range(n):
            c = chunk(r, Buffer.input, 0)
            c.copy(r, Buffer.output, r, sendtb=tbs[r * n + r])
            for p in range(n):
                if p != r:
                    c.put(p, "landing", r, sendtb=tbs[r * n + p])
                    c.signal(p, "landing", r, sendtb=tbs[r * n + p])
        for r in range(n):
            for p in range(n):
                if p != r:
                    landed = chunk(r, "landing", p)
                    landed.wait(p, Buffer.input, 0, recvtb=tbs[p * n + r])
                    landed.copy(r, Buffer.output, p, sendtb=tbs[p * n + r])
        assert prog.check()
        plan = prog.to_plan()
    check_plan(plan)
    result = execute_plan(plan, collective=prog.spec if instances == 1 else prog.spec.split(instances))
    assert result.passed, str(result)


def test_duplicated_replication_scatters_an_allgather() -> None:
    """ReplicationPolicy.duplicated puts instance k's copy of chunk i at i + k * buffer size: right for an
    AllReduce (test above), but an AllGather's rank data is no longer contiguous, and the plan interpreter says
    so (as a real run would compute it)."""
    with MSCCLPPProgram("dup_ag", fully_connected(2), AllGather(2, 1, False), 2,
                        replication_policy=ReplicationPolicy.duplicated):
        for r in range(2):
            c = chunk(r, Buffer.input, 0)
            c.copy(r, Buffer.output, r)
            c.put(1 - r, Buffer.output, r, sendtb=0)
        assert not Check()


def test_a_chunk_over_empty_later_slots_is_a_reference_and_carries_them_along(
        capsys: pytest.CaptureFixture[str]) -> None:
    # mscclpp's and MSCCLang's chunk() look only at the slot at index; the empty slot after it travels along
    with MSCCLPPProgram("ag_partial", fully_connected(2), AllGather(2, 1, False), 1) as prog:
        for r in range(2):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r, sendtb=0)
        pair = chunk(0, Buffer.output, 0, 2)  # output[1] of rank 0 is still empty here
        assert pair is not None and pair.size == 2
        pair.put(1, "staging", 0, sendtb=1)
        pair.signal(1, "staging", 0, sendtb=1)
        landed = chunk(1, "staging", 0)
        landed.wait(0, Buffer.output, 0, recvtb=1)
        landed.copy(1, Buffer.output, 0, sendtb=1)
        mine = chunk(1, Buffer.input, 0)
        mine.put(0, Buffer.output, 1, sendtb=2)
        mine.signal(0, Buffer.output, 1, sendtb=2)
        chunk(0, Buffer.output, 0).wait(1, Buffer.input, 0, recvtb=2)
        assert chunk(1, "staging", 1) is None  # the empty slot emptied its destination
        with pytest.raises(ProgramError, match="holds no data"):
            chunk(0, Buffer.output, 0, 2).reduce(chunk(1, "staging", 0, 2), recvtb=3)
        assert Check()
        Json()
        plan = json.loads(capsys.readouterr().out)
    assert execute_plan(plan, collective=prog.spec).passed
