"""MSCCL++'s own DSL (`mscclpp.language`, microsoft/mscclpp python/mscclpp/language, the MSCCLPPProgram
generation): its example programs (python/examples/*.py) run after changing only their imports from
`mscclpp.language` to `collsynth.language.mscclpplang`; each writes a plan that passes the plan interpreter."""

from __future__ import annotations

import json

import pytest

from collsynth.language.mscclpplang import Check, Json, MSCCLPPProgram, chunk, rank
from collsynth.language.mscclpplang.buffer import Buffer
from collsynth.language.mscclpplang.collectives import AllGather, AllReduce, SendRecv
from collsynth.language.mscclpplang.types import ChannelType, DataFormat, ReplicationPolicy


def _plan(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("size, instances", [(4, 1), (3, 2)])
def test_allreduce_ring_example(capsys, size: int, instances: int) -> None:
    """python/examples/allreduce_ring.py, body unchanged."""
    collective = AllReduce(size, size, True)
    with MSCCLPPProgram("allreduce_ring", collective, size, instances, protocol="Simple"):
        for step in range(0, size - 1):
            for index in range(0, size):
                rank = (index + step) % size
                next_rank = (index + step + 1) % size
                c = chunk(rank, Buffer.input, index)
                c.signal(next_rank, Buffer.input, index, 0)
                prev_rank = (index + step - 1) % size
                c = chunk(rank, Buffer.input, (index + size - 1) % size)
                c.wait(prev_rank, Buffer.input, (index + size - 1) % size, 0)
                c.reduce(chunk(prev_rank, Buffer.input, (index + size - 1) % size), recvtb=0)
        for step in range(-1, size - 2):
            for index in range(0, size):
                rank = (index + step) % size
                c = chunk(rank, Buffer.input, index)
                next_rank = (index + step + 1) % size
                c.put(next_rank, Buffer.input, index, sendtb=0)
                c.signal(next_rank, Buffer.input, index, 0)
                prev_rank = (index + step - 1) % size
                c = chunk(rank, Buffer.input, (index + size - 1) % size)
                c.wait(prev_rank, Buffer.input, (index + size - 1) % size, 0)
        Json()
        assert Check()
    plan = _plan(capsys)
    assert plan["name"] == "allreduce_ring" and len(plan["gpus"]) == size


def test_allreduce_allpairs_get_example(capsys) -> None:
    """python/examples/allreduce_allpairs_get.py, body unchanged: reduce from peers, then get their sums."""
    size = gpus = 4
    collective = AllReduce(size, gpus * gpus, True)
    with MSCCLPPProgram("allreduce_pairs", collective, size, 1, protocol="Simple"):
        for rank in range(size):
            for tb in range(size):
                index = rank * size
                c = chunk(rank, Buffer.input, index + tb)
                for nghr in range(size):
                    peer_index = nghr * size
                    if rank != nghr:
                        c_peer = chunk(rank, Buffer.input, peer_index + tb)
                        c_peer.signal(nghr, Buffer.input, peer_index + tb, sendtb=tb)
                for nghr in range(size):
                    if rank != nghr:
                        c.wait(nghr, Buffer.input, index + tb, recvtb=tb)
                for i in range(size):
                    nghr = (rank + i) % size
                    if rank != nghr:
                        c.reduce(chunk(nghr, Buffer.input, index + tb), recvtb=tb)
                for nghr in range(size):
                    if rank != nghr:
                        c.signal(nghr, Buffer.input, index + tb, sendtb=tb)
        for rank in range(size):
            for tb in range(size):
                for nghr in range(size):
                    if rank != nghr:
                        index = nghr * size
                        c = chunk(rank, Buffer.input, index + tb)
                        c.wait(nghr, Buffer.input, index + tb, recvtb=tb)
                for i in range(size):
                    nghr = (rank + i) % size
                    index = nghr * size
                    if rank != nghr:
                        c = chunk(rank, Buffer.input, index + tb)
                        c.get(nghr, Buffer.input, index + tb, recvtb=tb)
        Json()
        assert Check()
    assert len(_plan(capsys)["gpus"]) == size


def test_allreduce_allpairs_packet_example(capsys) -> None:
    """python/examples/allreduce_allpairs_packet.py (LL), body unchanged."""
    size = gpus = 4
    chunksperloop = gpus * gpus
    collective = AllReduce(size, chunksperloop, True)
    with MSCCLPPProgram("allreduce_packets", collective, size, 1, protocol="LL",
                        use_double_scratch_buffer=True):
        for r1 in range(size):
            for tb in range(size):
                if tb == r1:
                    continue
                remote_rank = tb
                index = remote_rank * size
                c = chunk(r1, Buffer.input, index, size)
                c.put_packet(remote_rank, "scratch", index=r1 * size, sendtb=tb)
        for r in range(size):
            for index in range(size):
                c = chunk(r, Buffer.input, r * size + index)
                for peer in range(size):
                    if peer != r:
                        c.reduce_packet(chunk(r, "scratch", peer * size + index), recvtb=index)
                for peer in range(size):
                    if peer != r:
                        c.put_packet(peer, "scratch", (size * size) + r * size + index, sendtb=index)
        for r in range(size):
            for peer in range(size):
                if peer != r:
                    c = chunk(r, "scratch", size * size + peer * size, size)
                    c.copy_packet(r, Buffer.input, peer * size, sendtb=peer)
        Json()
        assert Check()
    assert _plan(capsys)["protocol"] == "LL"


@pytest.mark.parametrize("proxy", [ChannelType.proxy, ChannelType.port])  # MSCCL++ renamed proxy to port
def test_send_recv_proxy_example(capsys, proxy: ChannelType) -> None:
    """python/examples/send_recv_proxy.py, body unchanged but for the channel type's two spellings."""
    size = 2
    collective = SendRecv(size, 1, False)
    with MSCCLPPProgram("send_recv", collective, size, 1):
        for r in range(size):
            for nghr in range(size):
                if nghr == r:
                    continue
                c = chunk(r, Buffer.input, 0)
                c.put(nghr, "scratch", 1, sendtb=0, chan_type=proxy)
                c.signal(nghr, "scratch", 1, sendtb=0, chan_type=proxy)
                c.flush(nghr, "scratch", 1, sendtb=0, chan_type=proxy)
        for r in range(size):
            c = chunk(r, "scratch", 1)
            c.wait(1 - r, Buffer.input, 0, recvtb=0, chan_type=proxy)
            c.copy(r, Buffer.output, 0, sendtb=0)
        Json()
        assert Check()
    assert _plan(capsys)["collective"] == "sendrecv"


def test_allgather_barrier_example(capsys) -> None:
    """python/examples/allgather_barrier.py, body unchanged (sm is also spelled memory)."""
    gpus = size = 3
    collective = AllGather(size, 1, False)
    with MSCCLPPProgram("allgather_with_barrier", collective, size, 2, protocol="Simple",
                        replication_policy=ReplicationPolicy.interleaved):
        for n in range(gpus):
            c = chunk(n, Buffer.input, 0, 1)
            for peer in range(gpus):
                if n != peer:
                    c.put(peer, Buffer.output, n, sendtb=peer, chan_type=ChannelType.sm)
                else:
                    c.copy(n, Buffer.output, n, sendtb=peer)
            r = rank(n)
            r.barrier(tb_list=list(range(gpus)))
            for peer in range(gpus):
                if n != peer:
                    c.signal(peer, Buffer.output, n, sendtb=peer, chan_type=ChannelType.memory)
        for n in range(gpus):
            for peer in range(gpus):
                c = chunk(n, Buffer.output, peer, 1)
                if n != peer:
                    c.wait(peer, Buffer.input, peer, recvtb=peer, chan_type=ChannelType.sm)
        Json()
        assert Check()
    assert len(_plan(capsys)["gpus"]) == gpus


def test_forwarding_packets_reads_them_as_packets(capsys) -> None:
    """put_packet(src_format=DataFormat.packet): packets that arrived in scratch go on to a third rank as they are
    (the executor's read-put-packet), never unpacked in between."""
    size = 3
    with MSCCLPPProgram("relay", AllGather(size, 1, False), size, 1, protocol="LL"):
        for r in range(size):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r, sendtb=0)
            chunk(r, Buffer.input, 0).put_packet((r + 1) % size, "scratch", r, sendtb=1)
        for r in range(size):
            came = chunk(r, "scratch", (r - 1) % size)
            came.put_packet((r + 1) % size, "scratch", (r - 1) % size, sendtb=2, src_format=DataFormat.packet)
        for r in range(size):
            for k in (1, 2):
                source = (r - k) % size
                chunk(r, "scratch", source).copy_packet(r, Buffer.output, source, sendtb=3)
        Json()
        assert Check()
    names = {op["name"] for gpu in _plan(capsys)["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]}
    assert "rppkt" in names


def test_mscclpp_lang_refusals_name_what_is_unsupported() -> None:
    with pytest.raises(Exception, match="ReplicationPolicy.packed is not supported"):
        MSCCLPPProgram("p", AllReduce(2, 2, True), 2, 2, replication_policy=ReplicationPolicy.packed)
    with pytest.raises(Exception, match="num_ranks 3 but the collective has 2 ranks"):
        MSCCLPPProgram("p", AllReduce(2, 2, True), 3, 1)
    with MSCCLPPProgram("nvls", AllReduce(2, 2, True), 2, 1):
        c = chunk(0, Buffer.input, 0)
        with pytest.raises(Exception, match="group_load_reduce \\(NVLS\\) is not lowered"):
            c.group_load_reduce([chunk(1, Buffer.input, 0)], recvtb=0)
        with pytest.raises(Exception, match="group_store \\(NVLS\\) is not lowered"):
            c.group_store([1], sendtb=0)


def test_star_import_gives_what_the_examples_use() -> None:
    namespace: dict = {}
    exec("from collsynth.language.mscclpplang import *", namespace)
    assert {"MSCCLPPProgram", "chunk", "rank", "Json", "Check"} <= set(namespace)
    assert namespace["MSCCLPPProgram"] is MSCCLPPProgram


@pytest.mark.parametrize("gpus, per_node", [(4, 2), (6, 3)])
def test_multinode_packet_allgather_runs_on_the_plan_interpreter(capsys, gpus: int, per_node: int) -> None:
    """The shape of python/examples/allgather_allpairs_multinodes_packets.py: packets to every peer's scratch,
    across nodes packed into a local temp buffer first (cpkt) and put over a port channel as they are, then
    each rank unpacks what arrived. The plan interpreter used to refuse it (it packed plain data on port puts)."""
    from collsynth.runtime.plan import execute_plan

    collective = AllGather(gpus, 1, True)
    with MSCCLPPProgram("allgather_multinodes_allpair", collective, gpus, 1, protocol="LL",
                        replication_policy=ReplicationPolicy.interleaved):
        for src in range(gpus):
            piece = chunk(src, Buffer.input, 0, 1)
            for hop in range(1, gpus):
                dst = (src + hop) % gpus
                tb = dst if dst < src else dst - 1
                if src // per_node == dst // per_node:
                    piece.put_packet(dst, Buffer.scratch, index=src, sendtb=tb)
                else:
                    piece.put_packet(dst, Buffer.scratch, index=src, sendtb=tb, chan_type=ChannelType.port,
                                     temp_buffer=Buffer.scratch, temp_buffer_index=src)
        for src in range(gpus):
            for hop in range(1, gpus):
                dst = (src + hop) % gpus
                tb = src if src < dst else src - 1
                chunk(dst, Buffer.scratch, src, 1).copy_packet(dst, Buffer.output, src, sendtb=tb + gpus - 1)
        Json()
        assert Check()
    plan = _plan(capsys)
    port_puts = [op for gpu in plan["gpus"] for tb in gpu["threadblocks"] for op in tb["ops"]
                 if op["name"] == "ppkt" and op.get("channel_type") == "port"]
    assert port_puts
    result = execute_plan(plan)
    assert result.passed, str(result)


@pytest.mark.parametrize("protocol, inplace, instances", [("Simple", False, 1), ("Simple", True, 2), ("LL", False, 2),
                                                          ("LL", True, 1)])
def test_broadcast_example_passes_the_plan_interpreter(capsys, protocol: str, inplace: bool, instances: int) -> None:
    """MSCCL++'s Broadcast(num_ranks, chunk_factor, inplace, root) (python/mscclpp/language/collectives.py):
    the example writes a plan that the interpreter runs without being told the collective (the plan names
    its root)."""
    from collsynth.language.mscclpplang.examples.broadcast import broadcast
    from collsynth.runtime.plan import execute_plan

    assert broadcast(5, instances, root=3, protocol=protocol, inplace=inplace, chunk_factor=2)
    plan = _plan(capsys)
    assert plan["collective"] == "broadcast" and plan["collsynth"] == {"root": 3} and plan["inplace"] == inplace
    assert execute_plan(plan).passed


def test_broadcast_check_looks_at_every_rank(capsys) -> None:
    """Upstream's check() reads rank 0's output for every rank; this one fails a peer that got nothing."""
    from collsynth.language.mscclpplang.collectives import Broadcast

    with MSCCLPPProgram("partial_bcast", Broadcast(3, 1, False, 0), 3, 1):
        data = chunk(0, Buffer.input, 0)
        data.copy(0, Buffer.output, 0, sendtb=0)
        data.put(1, Buffer.output, 0, sendtb=1)
        data.signal(1, Buffer.output, 0, sendtb=1)
        chunk(1, Buffer.output, 0).wait(0, Buffer.input, 0, recvtb=0)
        assert not Check()  # rank 2's output is empty
    assert "rank 2 output[0]" in capsys.readouterr().out
    with pytest.raises(Exception, match="root 3 is outside"):
        Broadcast(3, 1, False, 3)
