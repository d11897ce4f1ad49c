"""The rest of MSCCLang's collective classes, with MSCCLang's meaning: init_buffers/check/get_buffer_index of the
built-in collectives, SendRecv, num_ranks_per_node/num_chunk_groups, AllGather(create_all_chunks), Chunk.reduce,
and `prog.buffers` / the MSCCLProgram keyword attributes (programs written in MSCCLang's style, our own)."""

from __future__ import annotations

import json

import pytest

from collsynth.language import (
    Buffer,
    ChannelType,
    Check,
    MSCCLPPProgram,
    MSCCLProgram,
    ProgramError,
    ThreadblockPolicy,
    chunk,
)
from collsynth.language.collectives import (
    AllGather,
    AllReduce,
    AllToAll,
    Chunk,
    ReduceChunk,
    ReduceScatter,
    SendRecv,
)
from collsynth.topologies import fully_connected, ring


@pytest.mark.parametrize("coll", [AllReduce(4, 8, False), AllReduce(4, 4, True), AllGather(4, 2, False),
                                  AllGather(4, 2, True), AllToAll(4, 2, False), ReduceScatter(4, 2, False),
                                  ReduceScatter(4, 2, True), SendRecv(2, 3, False)])
def test_init_buffers_describe_the_same_collective_as_the_spec(coll) -> None:
    """Every input Chunk sits where the spec puts that chunk, and ends where the spec's postcondition wants it."""
    spec = coll.to_collective()
    buffers = coll.init_buffers()
    assert len(buffers) == coll.num_ranks
    for rank, named in enumerate(buffers):
        ins = named[Buffer.input]
        assert len(ins) == spec.input_chunks
        for index, item in enumerate(ins):
            chunk_id = spec.input_chunk(rank, index)
            assert (item.origin_rank, item.origin_index) == (rank, index)
            if spec.combining:
                continue  # sums: the destinations are every rank (dst_rank -1), checked by check() below
            ranks = sorted(spec.post[chunk_id])
            assert item.dst_rank in (-1, *ranks) and (item.dst_rank == -1) == (len(ranks) > 1)
            assert item.dst_index == spec.output_index(chunk_id, ranks[0])


def test_get_buffer_index_is_mscclangs() -> None:
    assert AllGather(4, 2, True).get_buffer_index(3, Buffer.input, 1) == (Buffer.output, 7)
    assert AllGather(4, 2, False).get_buffer_index(3, Buffer.input, 1) == (Buffer.input, 1)
    assert ReduceScatter(4, 2, True).get_buffer_index(2, Buffer.output, 1) == (Buffer.input, 5)
    assert AllReduce(4, 4, True).get_buffer_index(1, Buffer.output, 3) == (Buffer.input, 3)
    assert AllToAll(4, 1, True).get_buffer_index(1, Buffer.output, 3) == (Buffer.output, 3)


def test_collective_keywords() -> None:
    coll = AllReduce(8, 8, True, num_ranks_per_node=4)
    assert coll.num_ranks_per_node == 4 and coll.num_chunk_groups == 8  # AllReduce groups by rank by default
    assert AllReduce(8, 8, True, num_chunk_groups=2).num_chunk_groups == 2
    assert AllGather(4, 1, False).num_ranks_per_node == 4 and AllGather(4, 1, False).num_chunk_groups == 1
    every = AllGather(3, 1, False, create_all_chunks=True).init_buffers()
    assert all(x is not None for x in every[0][Buffer.output])
    with pytest.raises(ProgramError, match="2 ranks"):
        SendRecv(3, 1, False)


def test_chunk_reduce_builds_reduce_chunks() -> None:
    a, b, c = Chunk(0, 0), Chunk(1, 0), Chunk(2, 0)
    total = a.reduce(0, b).reduce(0, c)
    assert isinstance(total, ReduceChunk) and total == c.reduce(5, ReduceChunk(-1, [b, a]))
    assert total != a.reduce(0, b)


def ring_allgather(n: int, upto: int) -> None:
    for r in range(n):
        c = chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        for hop in range(1, upto):
            c = c.copy((r + hop) % n, Buffer.output, r)


def test_builtin_check_reads_prog_buffers(capsys: pytest.CaptureFixture[str]) -> None:
    n = 4
    coll = AllGather(n, 1, False)
    with MSCCLProgram("half", ring(n), coll, 1, threadblock_policy=ThreadblockPolicy.manual) as prog:
        ring_allgather(n, 2)
        assert not coll.check(prog)  # MSCCLang's check on prog.buffers: half the chunks are missing
        assert "incorrect" in capsys.readouterr().out
        assert prog.buffers[1][Buffer.output][0] == Chunk(0, 0) and prog.buffers[0][Buffer.output][2] is None
        assert prog.threadblock_policy is ThreadblockPolicy.manual and prog.check_xml and prog.instr_fusion
        assert prog.collective is coll  # MSCCLang: the collective object the program was given
    with MSCCLProgram("whole", ring(n), coll, 1) as prog:
        ring_allgather(n, n)
        assert coll.check(prog) and Check()


def test_allreduce_check_wants_sums(capsys: pytest.CaptureFixture[str]) -> None:
    n = 3
    coll = AllReduce(n, 1, True)
    with MSCCLProgram("ar", fully_connected(n), coll, 1) as prog:
        c = chunk(0, Buffer.input, 0)
        for r in range(1, n):
            c = chunk(r, Buffer.input, 0).reduce(c)
        assert not coll.check(prog)  # only the last rank holds the sum
        for r in range(n - 1):
            c.copy(r, Buffer.input, 0)
        assert coll.check(prog) and Check()


def test_sendrecv_program_in_both_dsls() -> None:
    with MSCCLProgram("sr", fully_connected(2), SendRecv(2, 2, False), 1):
        for r in range(2):
            chunk(r, Buffer.input, 0, 2).copy(1 - r, Buffer.output, 0)
        assert Check()
    with MSCCLPPProgram("sr_pp", fully_connected(2), SendRecv(2, 2, False), 1) as prog:
        for r in range(2):
            chunk(r, Buffer.input, 0, 2).put(1 - r, Buffer.output, 0, sendtb=0, chan_type=ChannelType.sm)
            chunk(r, Buffer.input, 0, 2).signal(1 - r, Buffer.output, 0, sendtb=0)
        for r in range(2):
            chunk(r, Buffer.output, 0, 2).wait(1 - r, Buffer.input, 0, recvtb=0)
        assert isinstance(prog.collective, SendRecv) and Check()
        assert json.loads(prog.generate_json())["gpus"][1]["id"] == 1
