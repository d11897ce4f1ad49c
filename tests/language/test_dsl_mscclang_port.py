"""MSCCLang-style programs of every shape run after changing only their imports (msccl. -> collsynth.; the
registered programs from collsynth.language.programs) and pass Check(): symbolically and in the interpreter."""

from __future__ import annotations

import pytest

from collsynth.language import Buffer, Check, MSCCLProgram, ThreadblockPolicy, chunk
from collsynth.language.collectives import AllGather, AllReduce, AllToAll, Chunk, Collective, ReduceScatter
from collsynth.language.programs.allreduce_a100_ring import allreduce_ring
from collsynth.language.programs.allreduce_allpairs import allreduce_allpairs
from collsynth.language.programs.alltoall_a100_8kp1 import alltoall_three_step
from collsynth.language.programs.alltoall_a100_yifan import alltoall_hierarchical
from collsynth.language.routines import allgather_ring_inplace, allreduce_ring_inplace
from collsynth.topologies import fully_connected
from collsynth.topologies.distributed import distributed_fully_connected, distributed_hub_and_spoke


def test_inplace_allpairs_allgather_uses_the_senders_offset() -> None:
    # MSCCLang resolves copy(p, Buffer.input, 0) in an in-place AllGather with the sender's offset: rank r's
    # chunk lands in output slot r of every rank
    with MSCCLProgram("ag", fully_connected(4), AllGather(4, 1, True)):
        for r in range(4):
            for p in range(4):
                if p != r:
                    chunk(r, Buffer.input, 0).copy(p, Buffer.input, 0)
        assert Check() is True


def test_inplace_reducescatter_uses_the_senders_offset() -> None:
    with MSCCLProgram("rs", fully_connected(4), ReduceScatter(4, 1, True)):
        for r in range(4):  # rank r's output (input slot r) collects every rank's slot r
            for p in range(4):
                if p != r:
                    chunk(r, Buffer.input, r).reduce(chunk(p, Buffer.input, r))
        assert Check() is True


@pytest.mark.parametrize("instances", [1, 2])
def test_out_of_place_ring_allgather_with_instances(instances: int) -> None:
    with MSCCLProgram("ring", fully_connected(4), AllGather(4, 1, False), instances):
        for r in range(4):
            c = chunk(r, Buffer.input, 0).copy(r, Buffer.output, r)
            for hop in range(1, 4):
                c = c.copy((r + hop) % 4, Buffer.output, r)
        assert Check() is True


def test_named_and_tuple_scratch_buffers() -> None:
    with MSCCLProgram("scratch", fully_connected(4), AllToAll(4, 1, False)):
        for r in range(4):
            for p in range(4):
                staged = chunk(r, Buffer.input, p).copy(p, (r, p), 0)  # a tuple names the scratch buffer
                mid = staged.copy(p, "named", r)
                mid.copy(p, Buffer.output, r)
        assert Check() is True


def test_routines() -> None:
    with MSCCLProgram("ar", fully_connected(4), AllReduce(4, 4, True)):
        allreduce_ring_inplace(4)
        assert Check() is True
    with MSCCLProgram("ag", fully_connected(4), AllGather(4, 1, True)):
        allgather_ring_inplace(4)
        assert Check() is True
    with MSCCLProgram("two-rings", fully_connected(8), AllReduce(8, 8, True)):
        allreduce_ring_inplace(4, gpu_offset=0, index_offset=0, ch=0)  # two independent 4-rings ...
        allreduce_ring_inplace(4, gpu_offset=4, index_offset=4, ch=1)
        assert Check() is False  # ... are not an 8-rank AllReduce


@pytest.mark.parametrize("build", [distributed_fully_connected, distributed_hub_and_spoke])
def test_distributed_topologies(build) -> None:
    topo = build(fully_connected(4), 2, 1)
    assert topo.num_ranks == 8 and topo.num_machines == 2 and topo.has_link(0, 7)
    with MSCCLProgram("dist", topo, AllReduce(8, 8, True)):
        allreduce_ring_inplace(8)
        assert Check() is True
    with MSCCLProgram("a2a", topo, AllToAll(8, 1, False)):
        alltoall_hierarchical(2, 4)
        assert Check() is True


def test_hub_and_spoke_shares_one_uplink_per_node() -> None:
    topo = distributed_hub_and_spoke(fully_connected(2), 2, 1)
    out = next(s for s in topo.switches if s.name == "copy_0_out_remote")
    assert out.links == frozenset({(0, 2), (0, 3), (1, 2), (1, 3)}) and out.bandwidth == 1


def test_registered_programs_with_manual_threadblocks() -> None:
    with MSCCLProgram("ring", fully_connected(4), AllReduce(4, 4, True), threadblock_policy=ThreadblockPolicy.manual):
        allreduce_ring(4, 2)
        assert Check() is True
    with MSCCLProgram("ap", fully_connected(4), AllReduce(4, 16, True), threadblock_policy=ThreadblockPolicy.manual):
        allreduce_allpairs(4)
        assert Check() is True
    with MSCCLProgram("3step", distributed_fully_connected(fully_connected(4), 2, 1), AllToAll(8, 2, False)):
        alltoall_three_step(2, 4, instances=2, ib_connections=2)
        assert Check() is True


class Shift(Collective):
    """A custom collective: rank r's chunk ends at rank r+1's output, checked by its own check()."""

    def init_buffers(self):
        return [{Buffer.input: [Chunk(r, 0, (r + 1) % self.num_ranks, 0)], Buffer.output: [None]}
                for r in range(self.num_ranks)]

    def check(self, prog):
        return all(prog.buffers[(r + 1) % self.num_ranks][Buffer.output][0] == Chunk(r, 0)
                   for r in range(self.num_ranks))


def test_custom_collective_with_its_own_check(capsys) -> None:
    with MSCCLProgram("shift", fully_connected(4), Shift(4, 1, False)):
        for r in range(4):
            chunk(r, Buffer.input, 0).copy((r + 1) % 4, Buffer.output, 0)
        assert Check() is True
    with MSCCLProgram("wrong", fully_connected(4), Shift(4, 1, False)):
        for r in range(4):
            chunk(r, Buffer.input, 0).copy((r + 2) % 4, Buffer.output, 0)
        assert Check() is False


def test_check_prints_only_on_failure(capsys) -> None:
    with MSCCLProgram("ok", fully_connected(2), AllGather(2, 1, False)):
        for r in range(2):
            chunk(r, Buffer.input, 0).copy(r, Buffer.output, r).copy(1 - r, Buffer.output, r)
        assert Check() is True
    assert capsys.readouterr().out == ""
    with MSCCLProgram("half", fully_connected(2), AllGather(2, 1, False)):
        chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
        assert Check() is False
    assert capsys.readouterr().out != ""
