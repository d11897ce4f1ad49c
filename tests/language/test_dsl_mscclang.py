"""MSCCLang compatibility: programs written against `msccl.` run with the `collsynth.` prefix."""

import contextlib
import io
import runpy
import sys
from pathlib import Path

import pytest
from lxml import etree

from collsynth.emit.msccl_xml import read_xml
from collsynth.language import (
    XML,
    Buffer,
    Check,
    Chunk,
    MSCCLProgram,
    ProgramError,
    ThreadblockPolicy,
    chunk,
)
from collsynth.language.collectives import AllGather, AllReduce, AllToAll, Collective, ReduceScatter
from collsynth.topologies import fully_connected, line, ring

PROGRAMS = Path(__file__).parent / "programs"


def run_program(name: str, *args: str) -> str:
    """Run an example program as a script; return what it printed."""
    out = io.StringIO()
    saved = sys.argv
    sys.argv = [str(PROGRAMS / name), *args]
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(str(PROGRAMS / name), run_name="__main__")
    finally:
        sys.argv = saved
    return out.getvalue()


@pytest.mark.parametrize("name, args", [
    ("allreduce_ring.py", ("8", "2", "1")),
    ("allreduce_ring.py", ("4", "1", "3", "--protocol", "LL")),
    ("allreduce_allpairs.py", ("4", "1")),
    ("allreduce_allpairs.py", ("3", "2")),
    ("alltoall_two_step.py", ("2", "3")),
])
def test_example_programs_print_xml_and_pass_check(name, args):
    printed = run_program(name, *args)
    xml, verdict = printed.rstrip("\n").rsplit("\n", 1)
    assert verdict == "True"
    root = etree.fromstring(xml)
    assert root.tag == "algo" and int(root.get("ngpus")) == int(args[0]) * (int(args[1]) if "two_step" in name else 1)
    ir = read_xml(xml)  # the printed XML is what the runtimes load
    assert ir.num_steps > 0


def test_ring_example_uses_the_manual_threadblocks():
    ir = read_xml(run_program("allreduce_ring.py", "4", "2", "1").rsplit("\n", 2)[0])
    # 2 hinted threadblocks per rank, each one channel, one send peer and one receive peer
    for gpu in ir.gpus:
        assert sorted((tb.send, tb.recv, tb.chan) for tb in gpu.tbs) == [
            ((gpu.id + 1) % 4, (gpu.id - 1) % 4, 0), ((gpu.id + 1) % 4, (gpu.id - 1) % 4, 1)]
    kinds = {step.type for _, tb in ir.threadblocks() for step in tb.steps}
    assert {"rrs", "rrcs", "rcs"} <= kinds  # fusion happened


def test_check_reports_a_wrong_program(capsys):
    with MSCCLProgram("half", ring(3), AllGather(3, 1, False), 1):
        for r in range(3):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
        chunk(0, Buffer.output, 0).copy(1, Buffer.output, 0)
        assert Check() is False
    printed = capsys.readouterr().out
    assert "rank 0 output[1] should hold chunk 1 but holds nothing" in printed


def test_context_is_reset_and_not_nested():
    topo, coll = fully_connected(2), AllReduce(2, 2, False)
    with pytest.raises(ProgramError, match=r"chunk\(\) needs an open program"):
        chunk(0, Buffer.input, 0)
    with MSCCLProgram("a", topo, coll, 1), pytest.raises(ProgramError, match="already open"):
        MSCCLProgram("b", topo, coll, 1).__enter__()
    with pytest.raises(ProgramError, match=r"XML\(\) needs an open program"):
        XML()
    with pytest.raises(ZeroDivisionError), MSCCLProgram("c", topo, coll, 1):
        raise ZeroDivisionError  # the context is reset even when the block fails
    with MSCCLProgram("d", topo, coll, 1):
        chunk(0, Buffer.input, 0)


@pytest.mark.parametrize("coll, name, sizes", [
    (AllReduce(4, 4, True), "allreduce", (4, 4)),
    (AllReduce(4, 2, False), "allreduce", (2, 2)),  # MSCCLang: chunk_factor chunks per rank
    (AllGather(4, 2, False), "allgather", (2, 8)),
    (AllToAll(4, 1, False), "alltoall", (4, 4)),
    (ReduceScatter(4, 1, True), "reducescatter", (4, 1)),
])
def test_mscclang_collectives_layouts(coll, name, sizes):
    spec = coll.to_collective()
    assert spec.name == name
    assert (spec.input_chunks, spec.output_chunks) == sizes
    assert spec.inplace == coll.inplace


class Broadcast0(Collective):
    """A custom MSCCLang collective: rank 0's chunks must reach every rank's output."""

    def init_buffers(self):
        buffers = []
        for r in range(self.num_ranks):
            ins = [Chunk(r, c, -1, c) if r == 0 else None for c in range(self.chunk_factor)]
            buffers.append({Buffer.input: ins, Buffer.output: [None] * self.chunk_factor})
        return buffers

    def check(self, prog):
        return all(prog.buffers[r][Buffer.output][c] == Chunk(0, c)
                   for r in range(self.num_ranks) for c in range(self.chunk_factor))


def test_custom_mscclang_collective_subclass():
    with MSCCLProgram("bcast", line(3), Broadcast0(3, 2, False), 1, threadblock_policy=ThreadblockPolicy.manual):
        c = chunk(0, Buffer.input, 0, 2).copy(0, Buffer.output, 0, sendtb=0)
        c = c.copy(1, Buffer.output, 0, sendtb=1, recvtb=0)
        assert Check() is False
        c.copy(2, Buffer.output, 0, sendtb=1, recvtb=0)
        assert Check() is True
