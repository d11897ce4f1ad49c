"""MSCCLang's remaining public names: create_scratch, Print, Ref, and XML() for a runtime target."""

from __future__ import annotations

import pytest

from collsynth.compiler.split import target_violation
from collsynth.emit.msccl_xml import read_xml
from collsynth.language import (
    XML,
    Buffer,
    Check,
    ChunkRef,
    MSCCLProgram,
    Print,
    ProgramError,
    Ref,
    chunk,
    create_scratch,
)
from collsynth.language.collectives import AllReduce
from collsynth.runtime import execute
from collsynth.topologies import fully_connected, ring


def test_create_scratch_declares_a_named_buffer(capsys) -> None:
    with MSCCLProgram("pairs", fully_connected(2), AllReduce(2, 1, False)):
        scratch = {r: create_scratch(r, ("sum", r)) for r in range(2)}
        for r in range(2):
            got = chunk(1 - r, Buffer.input, 0).copy(r, scratch[r], 0)
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, 0).reduce(got)
        assert Check()
        Print()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("r0.('sum', 0)[0] := r1.input[0]") and len(lines) == 6


def test_create_scratch_refuses_what_is_not_a_scratch_buffer() -> None:
    with MSCCLProgram("bad", fully_connected(2), AllReduce(2, 1, False)):
        with pytest.raises(ProgramError, match="names an input/output buffer"):
            create_scratch(0, Buffer.output)
        with pytest.raises(ProgramError, match="rank 5 is not in 0..1"):
            create_scratch(5, "s")
        with pytest.raises(ProgramError, match="a buffer is Buffer.input"):
            create_scratch(0, [1])  # type: ignore[arg-type]
    with pytest.raises(ProgramError, match=r"create_scratch\(\) needs an open program"):
        create_scratch(0, "s")


def test_ref_is_the_chunk_reference() -> None:
    assert Ref is ChunkRef
    with MSCCLProgram("r", fully_connected(2), AllReduce(2, 1, False)):
        assert isinstance(chunk(0, Buffer.input, 0), Ref)


def _long_ring(n: int) -> None:
    """A ring AllReduce of n ranks, one chunk per rank: 2(n-1) steps per threadblock."""
    for owner in range(n):
        ref = chunk(owner, Buffer.input, owner)
        for hop in range(1, n):
            ref = chunk((owner + hop) % n, Buffer.input, owner).reduce(ref)
        for hop in range(n - 1):
            ref = ref.copy((owner + hop) % n, Buffer.input, owner)


def test_xml_for_a_target_is_split_to_its_limits(capsys) -> None:
    n = 34  # 66 steps per threadblock unsplit: over the 64 that the executor and RCCL load
    with MSCCLProgram("long", ring(n), AllReduce(n, n, True)) as program:
        _long_ring(n)
        XML()
        XML("rccl")
        assert Check()
    plain, rccl = capsys.readouterr().out.split("</algo>")[:2]
    plain_ir, rccl_ir = read_xml(plain + "</algo>"), read_xml(rccl + "</algo>")
    assert "at most 64 steps per thread block" in target_violation(plain_ir, "rccl")
    assert target_violation(rccl_ir, "rccl") is None
    assert execute(rccl_ir, backend="cpu", collective=program.program().collective).passed  # the split IR is right
