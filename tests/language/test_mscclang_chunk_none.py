"""MSCCLang's chunk() answers None for a slot that holds no data yet (microsoft/msccl-tools
msccl/language/__init__.py, `chunk()`: `if _curr().buffers[rank][buffer][index] is None: return None`; the
MSCCL++ half does the same), and programs branch on it; a rank or buffer outside the program still raises."""

from __future__ import annotations

import pytest

from collsynth.language import XML, Buffer, Check, MSCCLPPProgram, MSCCLProgram, ProgramError, chunk
from collsynth.language.collectives import AllGather
from collsynth.topologies import fully_connected


def test_chunk_of_an_empty_slot_is_none_and_a_program_can_branch_on_it(capsys) -> None:
    # an MSCCLang AllGather that forwards whatever each rank already holds, probing with chunk() is None
    size = 3
    with MSCCLProgram("probe", fully_connected(size), AllGather(size, 1, False), 1):
        assert chunk(1, Buffer.output, 0) is None
        for r in range(size):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        for r in range(size):
            for index in range(size):
                held = chunk(r, Buffer.output, index)
                if held is None or index != r:
                    continue
                for peer in range(size):
                    if chunk(peer, Buffer.output, index) is None:
                        held.copy(peer, Buffer.output, index)
        assert all(chunk(r, Buffer.output, i) is not None for r in range(size) for i in range(size))
        XML()
        assert Check()  # the postcondition, then the compiled program in the CPU interpreter
    assert "<algo" in capsys.readouterr().out


def test_chunk_outside_the_program_still_raises() -> None:
    with MSCCLProgram("bounds", fully_connected(2), AllGather(2, 1, False), 1):
        with pytest.raises(ProgramError, match="outside"):
            chunk(2, Buffer.output, 0)
        with pytest.raises(ProgramError, match="outside"):
            chunk(0, Buffer.output, 2)
        with pytest.raises(ProgramError, match="scratch buffer 'tmp' has 0 chunks"):
            chunk(0, "tmp", 0)


def test_mscclpp_chunk_of_an_empty_slot_is_none(capsys) -> None:
    with MSCCLPPProgram("probe_pp", fully_connected(2), AllGather(2, 1, False), 1):
        assert chunk(0, Buffer.output, 1) is None and chunk(1, Buffer.output, 0) is None
        for r in range(2):
            c = chunk(r, Buffer.input, 0)
            c.put(1 - r, Buffer.output, r, sendtb=0)
            c.signal(1 - r, Buffer.output, r, sendtb=0)
            c.copy(r, Buffer.output, r, sendtb=0)
        for r in range(2):
            received = chunk(r, Buffer.output, 1 - r)
            assert received is not None
            received.wait(1 - r, Buffer.input, 0, recvtb=0)
        assert Check()  # traced chunks, then the execution plan in the plan interpreter


def test_a_multi_chunk_reference_needs_only_its_first_slot_written_and_carries_empty_slots_along(capsys) -> None:
    """MSCCLang's chunk(rank, buffer, index, size) tests only `buffers[rank][buffer][index]`; its copy then
    writes every slot of the source over the destination (apply_send), so an empty source slot empties the
    destination slot, and a reduce over an empty slot fails (msccl-tools msccl/language/__init__.py)."""
    from collsynth.language.collectives import AllReduce

    size = 3
    with MSCCLProgram("partial", fully_connected(size), AllGather(size, 1, False), 1):
        for r in range(size):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        head = chunk(0, Buffer.output, 0, size=size)  # output[1] and output[2] of rank 0 are empty
        assert head is not None
        head.copy(1, Buffer.output, 0)  # rank 1's output[1] was written; the copy empties it
        assert chunk(1, Buffer.output, 0) is not None and chunk(1, Buffer.output, 1) is None
        assert not Check()
        chunk(1, Buffer.input, 0).copy(1, Buffer.output, 1)
        for r in range(size):
            for peer in range(size):
                if chunk(peer, Buffer.output, r) is None:
                    chunk(r, Buffer.input, 0).copy(peer, Buffer.output, r)
        XML()
        assert Check()
    assert "<algo" in capsys.readouterr().out
    with MSCCLProgram("partial_reduce", fully_connected(2), AllReduce(2, 2, False), 1):
        chunk(0, Buffer.input, 0).copy(0, Buffer.output, 0)
        with pytest.raises(ProgramError, match=r"output\[1\] holds no data"):
            chunk(1, Buffer.input, 0, size=2).reduce(chunk(0, Buffer.output, 0, size=2))
