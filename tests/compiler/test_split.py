"""compile_program(target=...): the library fits each runtime's loader limits (threadblocks split over channels,
send-only and receive-only threadblocks paired, instances folded), every split IR still passes the reference
interpreter, and what cannot fit is refused with one line naming the limit and the runtime."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.algorithms import LIBRARY
from collsynth.compiler import compile_program, instance_collective
from collsynth.compiler.split import TargetLimitError, fold_instances, target_violation, waited_first
from collsynth.core.targets import TARGETS, TargetError, get_target
from collsynth.runtime import execute
from collsynth.topologies.library import fully_connected

NODES = {8: 2, 16: 2, 64: 8}


def topology(name: str, n: int, nodes: int | None = None):
    topo = fully_connected(n)
    if nodes is None and LIBRARY[name].multi_node:
        nodes = NODES[n]
    if nodes is not None:
        topo = replace(topo, name=f"{topo.name}/{nodes}nodes", machines=tuple(r // (n // nodes) for r in range(n)))
    return topo


def build(name: str, n: int, instances: int = 1, nodes: int | None = None, **extra):
    params = {"channels": 2} if "channels" in LIBRARY[name].parameters else {}
    return LIBRARY[name].builder(topology(name, n, nodes), instances=instances, **params, **extra)


def passes(ir, program) -> bool:
    coll = instance_collective(program.collective, program.instances)
    return execute(ir, backend="cpu", nbytes=coll.input_chunks * 2 * 4, collective=coll).passed


# Programs that break a runtime limit without splitting (64 ranks): each is split to fit and still correct.
NEEDS_SPLIT = [("ring_allgather", 1), ("ring_reducescatter", 2), ("ring_allreduce", 1),
               ("allpairs_allreduce_two_phase", 1), ("allpairs_alltoall", 2)]


@pytest.mark.parametrize("target", ["msccl-executor", "rccl"])
@pytest.mark.parametrize(("name", "instances"), NEEDS_SPLIT)
def test_split_fits_and_runs(target: str, name: str, instances: int) -> None:
    program = build(name, 64, instances)
    ir = compile_program(program, target=target)
    assert target_violation(ir, target) is None
    assert passes(ir, program)


def test_unsplit_ring_breaks_the_64_step_limit() -> None:
    ir = compile_program(build("ring_allreduce", 64))
    assert "at most 64 steps per thread block" in target_violation(ir, "msccl-executor")
    assert target_violation(ir, "msccl-legacy") is None  # 256 steps there


def test_unpaired_allpairs_breaks_rccl_threadblock_limit() -> None:
    ir = compile_program(build("allpairs_alltoall", 64))
    assert "at most 64 thread blocks per GPU" in target_violation(ir, "rccl")


def test_custom_collective_refused_by_executor_and_rccl() -> None:
    program = build("alltonext", 8)
    for target in ("msccl-executor", "rccl"):
        with pytest.raises(TargetLimitError, match=r"cannot load a user-defined collective \(coll=\"custom\"\)"):
            compile_program(program, target=target)
    assert compile_program(program, target="msccl-legacy").collective == "custom"


def test_unknown_target_refused() -> None:
    with pytest.raises(TargetError, match="unknown target 'nccl'; use one of msccl-executor, rccl"):
        get_target("nccl")
    assert set(TARGETS) == {"msccl-executor", "rccl", "msccl-legacy", "none"}


def test_fold_instances_keeps_the_layout() -> None:
    program = build("allpairs_alltoall", 8, 2)
    folded = fold_instances(program)
    assert folded.instances == 1 and folded.collective == instance_collective(program.collective, 2)
    ir = compile_program(folded)
    assert passes(ir, folded)


def test_fold_keeps_ops_whole() -> None:
    """Folding makes one op per piece of at most MAX_COUNT chunks (count 2c for an op of c chunks and 2 copies),
    not one op per chunk and copy."""
    program = build("allpairs_allreduce_one_phase", 8, 2)
    folded = fold_instances(program)
    assert len(folded.ops) == len(program.ops)
    assert sorted(op.src.count for op in folded.ops) == sorted(2 * op.src.count for op in program.ops)
    assert passes(compile_program(folded), folded)


def test_one_phase_allpairs_at_64_ranks_with_2_instances_fits_rccl() -> None:
    """126 paired threadblocks per GPU unfolded; folded, the two copies share the 63 peer threadblocks (RCCL
    loads 64) and each op stays whole, so no threadblock runs more than 64 steps."""
    program = build("allpairs_allreduce_one_phase", 64, 2)
    ir = compile_program(program, target="rccl")
    assert target_violation(ir, "rccl") is None
    assert max(len(gpu.tbs) for gpu in ir.gpus) <= 64
    assert passes(ir, program)


def test_waited_first_renumbers_dependencies() -> None:
    ir = compile_program(build("allpairs_allreduce_two_phase", 8))
    renumbered = waited_first(ir)
    for gpu in renumbered.gpus:
        waited = {s.depid for tb in gpu.tbs for s in tb.steps if s.depid >= 0}
        assert waited == set(range(len(waited)))
    program = build("allpairs_allreduce_two_phase", 8)
    assert passes(renumbered, program)


def test_manual_threadblocks_are_not_split() -> None:
    program = build("ring_allreduce", 64)
    program = replace(program, options=replace(program.options, threadblock_policy="manual"))
    with pytest.raises(TargetLimitError, match="placed by hand"):
        compile_program(program, target="rccl")


def _library_cases():
    for name, entry in LIBRARY.items():
        if name == "alltonext":  # a custom collective: refused by both (tested above)
            continue
        for n in (8, 16, 64):
            if entry.fits(n, NODES[n]) is None:
                yield name, n, None
        if entry.multi_node:
            yield name, 16, 2
            yield name, 64, 8


@pytest.mark.slow
@pytest.mark.parametrize("target", ["msccl-executor", "rccl"])
def test_library_compiles_for_target(target: str) -> None:
    refused = []
    for name, n, nodes in _library_cases():
        for instances in (1, 2):
            for protocol in ("Simple", "LL", "LL128"):
                program = build(name, n, instances, nodes, protocol=protocol)
                try:
                    ir = compile_program(program, target=target)
                except TargetLimitError as err:
                    refused.append(f"{name}:{n}:{instances}: {err}")
                    continue
                assert target_violation(ir, target) is None
                if n <= 16:
                    assert passes(ir, program), (name, n, instances)
    assert refused == [], refused


def tight(max_steps: int, max_tbs: int):
    """A made-up runtime with small limits, to exercise every split on small programs."""
    return replace(get_target("rccl"), name="tight", runtime="a tight test runtime", max_steps_per_tb=max_steps,
                   max_tbs_per_gpu=max_tbs)


def test_tight_target_is_met_by_spreading() -> None:
    program = build("ring_allreduce", 8)
    ir = compile_program(program, target=tight(8, 64))
    assert max(len(tb.steps) for _, tb in ir.threadblocks()) <= 8 < max(
        len(tb.steps) for _, tb in compile_program(program).threadblocks())
    assert passes(ir, program)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(["ring_allgather", "ring_allreduce", "allpairs_alltoall", "allpairs_allreduce_two_phase",
                             "recursive_doubling_allgather", "double_binary_tree_allreduce"]),
       n=st.sampled_from([4, 8]), instances=st.integers(1, 2), max_steps=st.integers(4, 24),
       max_tbs=st.integers(3, 16))
def test_split_either_fits_and_runs_or_refuses(name, n, instances, max_steps, max_tbs) -> None:
    program = build(name, n, instances)
    target = tight(max_steps, max_tbs)
    try:
        ir = compile_program(program, target=target)
    except TargetLimitError as err:
        assert "a tight test runtime" in str(err) and "\n" not in str(err)
        return
    assert target_violation(ir, target) is None
    assert passes(ir, program)


def _with_steps(ir, steps, tb_index=0):
    gpu = ir.gpus[0]
    tbs = list(gpu.tbs)
    tbs[tb_index] = replace(tbs[tb_index], steps=tuple(replace(s, s=k) for k, s in enumerate(steps)))
    return replace(ir, gpus=(replace(gpu, tbs=tuple(tbs)),) + ir.gpus[1:])


def test_a_nop_dependency_list_must_end_in_a_step_with_its_own_dependency() -> None:
    """msccl_parser.cc / topo.cc: 'when there is a chain of dependencies, the last reduction must be a part of
    the first immediate instruction ... XML will be ignored'."""
    from collsynth.ir import NOP

    ir = compile_program(build("ring_allreduce", 4))
    first = ir.gpus[0].tbs[0].steps[0]
    nop = replace(first, type=NOP, depid=1, deps=0, hasdep=False)
    broken = _with_steps(ir, (nop, replace(first, depid=-1, deps=-1)) + ir.gpus[0].tbs[0].steps[1:])
    for target in ("msccl-executor", "rccl", "msccl-legacy"):
        assert "chain of dependencies" in target_violation(broken, target)
    assert target_violation(broken, "none") is None
    ended = _with_steps(ir, (nop, replace(first, depid=1, deps=0)) + ir.gpus[0].tbs[0].steps[1:])
    assert target_violation(ended, "msccl-executor") is None


def test_reduction_continuations_end_no_dependency_list() -> None:
    """Consecutive `re` steps into one destination (no depid, no hasdep) are one transfer: a nop list before the
    first is ended by the first, and the rest continue it."""
    from collsynth.ir import NOP, REDUCE, Step

    ir = compile_program(build("ring_allreduce", 4))
    nop = Step(0, NOP, "i", -1, "i", -1, 0, depid=1, deps=0)
    reduces = [Step(0, REDUCE, "s", k, "o", 0, 1, depid=1 if k == 0 else -1, deps=0 if k == 0 else -1)
               for k in range(3)]
    assert target_violation(_with_steps(ir, (nop, *reduces)), "rccl") is None
    # a reduction into another destination is a new transfer: a nop list before it must end with its dependency
    other = Step(0, REDUCE, "s", 5, "o", 1, 1)
    assert "chain of dependencies" in target_violation(_with_steps(ir, (nop, *reduces, nop, other)), "rccl")


def test_offsets_beyond_16_bits_and_crowded_channels_are_refused() -> None:
    ir = compile_program(build("ring_allreduce", 4))
    step = ir.gpus[0].tbs[0].steps[0]
    far = _with_steps(ir, (replace(step, srcoff=40000),) + ir.gpus[0].tbs[0].steps[1:])
    assert "16 bits" in target_violation(far, "msccl-executor")
    tb = ir.gpus[0].tbs[0]
    crowded = replace(ir, gpus=(replace(ir.gpus[0], tbs=tuple(replace(tb, id=k) for k in range(33))),) + ir.gpus[1:])
    assert "too many sends per channel" in target_violation(crowded, "msccl-executor")


def test_crowded_channels_are_thinned_by_spreading() -> None:
    program = build("allpairs_alltoall", 8)
    plain = compile_program(program)
    per_channel = max(sum(1 for tb in gpu.tbs if tb.send >= 0 and tb.chan == c) for gpu in plain.gpus
                      for c in range(plain.nchannels))
    crowded = replace(get_target("rccl"), name="crowded", max_tbs_per_channel=per_channel - 1)
    assert "thread blocks per channel" in target_violation(plain, crowded)
    ir = compile_program(program, target=crowded)
    assert target_violation(ir, crowded) is None and ir.nchannels > plain.nchannels
    assert passes(ir, program)


def test_thread_block_ids_must_be_contiguous() -> None:
    ir = compile_program(build("ring_allreduce", 4))
    gpu = ir.gpus[0]
    gap = replace(ir, gpus=(replace(gpu, tbs=tuple(replace(tb, id=tb.id + 1) for tb in gpu.tbs)),) + ir.gpus[1:])
    assert "thread block is missing" in target_violation(gap, "rccl")
    assert target_violation(ir, "rccl") is None


def test_threadblocks_longer_than_msccls_default_fit_every_target_that_allows_them():
    # a 130-rank ring AllReduce runs 260 steps (nops included) on one threadblock: above MSCCL's default 256
    ring = LIBRARY["ring_allreduce"].builder(fully_connected(130))
    with pytest.raises(Exception, match="needs 260 steps; MSCCL runs at most 256"):
        compile_program(ring)
    unlimited = compile_program(ring, "none")  # no runtime loads it: no step limit, one threadblock
    assert max(len(tb.steps) for _, tb in unlimited.threadblocks()) == 260
    assert passes(unlimited, ring)
    for name in ("msccl-executor", "rccl"):
        split = compile_program(ring, name)
        assert target_violation(split, name) is None
        assert max(len(tb.steps) for _, tb in split.threadblocks()) <= get_target(name).max_steps_per_tb
        assert passes(split, ring)


def test_a_channel_with_more_threadblocks_than_msccl_runs_is_spread_not_refused() -> None:
    """36 ranks, every peer's connection on channel 0: 35 threadblocks there, over the 32 MSCCL runs on one
    channel (the IR validator's check, which the default compile keeps). For a target the compiler spreads the
    connections over more channels, and the program stays correct."""
    from collsynth.ir.validate import IRError
    from collsynth.language import Buffer, MSCCLProgram, chunk
    from collsynth.language.collectives import AllToAll

    n = 36
    with MSCCLProgram("one_channel_alltoall", fully_connected(n), AllToAll(n, 1, False), 1) as dsl:
        for src in range(n):
            for dst in range(n):
                chunk(src, Buffer.input, dst).copy(dst, Buffer.output, src, ch=0)
        program = dsl.program()
    with pytest.raises(IRError, match="35 threadblocks on channel 0"):
        compile_program(program)
    ir = compile_program(program, target="msccl-executor")
    assert target_violation(ir, "msccl-executor") is None and ir.nchannels >= 2
    assert all(sum(1 for tb in gpu.tbs if tb.chan == c) <= 32 for gpu in ir.gpus for c in range(ir.nchannels))
    assert passes(ir, program)
