"""The numpy versions of the cross-instance waits, of every instance's waits and of the nops give exactly what
their step-by-step references give (instances_reference), on random programs (test_compiler_property's) and on
the library's programs with several instances, interleaved and not."""

import pytest
from hypothesis import given, settings
from instances_reference import cross_instance_waits as reference_cross
from instances_reference import instance_waits as reference_waits
from instances_reference import with_nops as reference_nops
from test_compiler_instances import allpairs_through_scratch, mixed_sizes
from test_compiler_property import random_programs

from collsynth.algorithms.registry import library_programs
from collsynth.collectives import make_collective
from collsynth.compiler import compile_program, cross_instance_waits, replicate_instances
from collsynth.compiler.instances import instance_waits
from collsynth.compiler.lowering import _numbered, _with_nops
from collsynth.compiler.pipeline import with_options
from collsynth.language import Buffer, ProgramBuilder
from collsynth.topologies import fully_connected, resolve_topology


def forms(program, instances, **options):
    """The Dependencies form and the program with its options, as compile_program hands them on."""
    seen = {}
    compile_program(program, instances=instances, after_each=lambda name, form: seen.setdefault(name, form),
                    **options)
    return seen["insert_dependencies"], with_options(program, instances=instances, **options)


def check_case(program, instances, **options):
    deps, program = forms(program, instances, **options)
    placement, copies = deps.placement, program.instances
    interleaved = program.options.interleaved_replication
    cross = cross_instance_waits(placement, copies, interleaved)
    assert cross == reference_cross(placement, copies, interleaved)
    per_instance = 1 + max((tb.chan for tbs in placement.tbs for tb in tbs), default=0)
    new_ids = [_numbered(tbs, copies, per_instance) for tbs in placement.tbs]
    if cross:
        assert instance_waits(placement, deps.waits, copies, cross, new_ids) == reference_waits(
            placement, deps.waits, copies, cross, new_ids)
    for tbs in replicate_instances(deps, program).gpus:
        if any(max(map(len, tb.deps), default=0) > 1 for tb in tbs):
            assert _with_nops(tbs) == reference_nops(tbs)
    return bool(cross)


@settings(max_examples=60, deadline=None)
@given(random_programs())
def test_random_programs(case):
    program, instances, interleaved, _ = case
    check_case(program, instances, interleaved_replication=interleaved)


def overwrite():
    """Rank 1 receives two chunks in one transfer, then the second one again alone: instance 0 of the second
    receive writes a part that instance 1 of the first wrote, nothing read in between (write after write)."""
    b = ProgramBuilder("overwrite", fully_connected(2), make_collective("allgather", 2, 2))
    b.chunk(0, Buffer.input, 0, 2).copy(1, Buffer.output, 0)
    b.chunk(0, Buffer.input, 1).copy(1, Buffer.output, 1)
    return b.build()


@pytest.mark.parametrize("instances", [2, 3, 4])
def test_overlapping_instances(instances):
    assert check_case(mixed_sizes(), instances)
    assert check_case(allpairs_through_scratch(4), instances)
    assert check_case(overwrite(), instances)


@pytest.mark.parametrize("topology", ["ring:8", "dgx1"])
@pytest.mark.parametrize("collective", ["allreduce", "allgather", "reducescatter", "alltoall"])
def test_library_programs(topology, collective):
    for _, program in library_programs(resolve_topology(topology), collective):
        for instances in (2, 3):
            for options in ({}, {"interleaved_replication": False}, {"instr_fusion": False}):
                check_case(program, instances, **options)
