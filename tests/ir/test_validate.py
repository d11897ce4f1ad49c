from dataclasses import replace

import pytest

from collsynth.core.errors import CollsynthError
from collsynth.ir import MAX_STEPS_PER_TB, Algo, Step, Threadblock, coll_spelling
from collsynth.ir.validate import MAX_XML_NODES, IRError, validate
from collsynth.runtime import samples


def base() -> Algo:
    """A valid 3-rank IR with cross-threadblock dependencies, nops and every buffer."""
    return samples.allreduce_via_scratch(3)


def edit_step(ir: Algo, gpu: int, tb: int, step: int, **changes) -> Algo:
    g = ir.gpus[gpu]
    t = g.tbs[tb]
    steps = list(t.steps)
    steps[step] = replace(steps[step], **changes)
    return edit_tb(ir, gpu, tb, steps=tuple(steps))


def edit_tb(ir: Algo, gpu: int, tb: int, **changes) -> Algo:
    g = ir.gpus[gpu]
    tbs = list(g.tbs)
    tbs[tb] = replace(tbs[tb], **changes)
    return edit_gpu(ir, gpu, tbs=tuple(tbs))


def edit_gpu(ir: Algo, gpu: int, **changes) -> Algo:
    gpus = list(ir.gpus)
    gpus[gpu] = replace(gpus[gpu], **changes)
    return replace(ir, gpus=tuple(gpus))


def refused(ir: Algo, pattern: str) -> str:
    with pytest.raises(IRError, match=pattern) as info:
        validate(ir)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("ir", [base(), samples.ring_allreduce(5, channels=3), samples.ring_allgather(4, inplace=True),
                                samples.pairwise_alltoall(4)], ids=lambda ir: ir.name)
def test_valid_irs_pass_unchanged(ir):
    assert validate(ir) is ir


def test_irerror_is_a_user_facing_error():
    assert issubclass(IRError, CollsynthError)


def test_threadblock_ids_must_be_contiguous():
    ir = edit_tb(base(), 1, 2, id=5)
    refused(ir, r"gpu 1: threadblock ids must be contiguous from 0; found tb 5 at position 2")


def test_step_numbers_must_be_contiguous():
    refused(edit_step(base(), 0, 1, 2, s=3), r"gpu 0 tb 1 step 2: step numbers must be contiguous from 0; found s=3")


@pytest.mark.parametrize("cnt", [0, 72, -1])
def test_count_must_be_1_to_71(cnt):
    refused(edit_step(base(), 2, 0, 0, cnt=cnt), rf"gpu 2 tb 0 step 0: cnt={cnt} is outside 1..71 \(MSCCL_MAX_COUNT\)")


def test_nop_count_may_be_zero_but_not_above_71():
    ir = base()
    assert ir.gpus[0].tbs[2].steps[1].type == "nop" and ir.gpus[0].tbs[2].steps[1].cnt == 0
    refused(edit_step(ir, 0, 2, 1, cnt=80), r"gpu 0 tb 2 step 1: nop cnt=80 is outside 0..71")


def test_at_most_256_steps_per_threadblock():
    steps = tuple(Step(i, "cpy", "i", 0, "o", 0, 1) for i in range(MAX_STEPS_PER_TB + 1))
    local = samples.pairwise_alltoall(2)  # gpu 0 tb 1 copies locally and nobody waits on it
    refused(edit_tb(local, 0, 1, steps=steps), r"gpu 0 tb 1: 257 steps exceed the runtime limit of 256 steps per")
    assert validate(edit_tb(local, 0, 1, steps=steps[:MAX_STEPS_PER_TB])) is not None


def test_channel_must_be_below_32_and_below_nchannels():
    refused(edit_tb(base(), 0, 2, chan=32), r"gpu 0 tb 2: chan=32 is outside 0..31")
    refused(edit_tb(base(), 0, 2, chan=1), r"gpu 0 tb 2: chan=1 but the algo declares nchannels=1")
    refused(replace(base(), nchannels=33), r"algo nchannels=33 is outside 1..32")


def test_unknown_step_type_and_buffer():
    refused(edit_step(base(), 1, 0, 0, type="put"), r"gpu 1 tb 0 step 0: unknown step type 'put'")
    refused(edit_step(base(), 1, 0, 0, srcbuf="x"), r"gpu 1 tb 0 step 0: srcbuf='x' is not a buffer")
    refused(edit_step(base(), 1, 2, 1, dstbuf="scratch"), r"gpu 1 tb 2 step 1: dstbuf='scratch' is not a buffer")


def test_dependency_on_a_missing_threadblock_or_step():
    refused(edit_step(base(), 0, 0, 2, depid=7), r"gpu 0 tb 0 step 2: depends on tb 7, which gpu 0 does not have")
    refused(edit_step(base(), 0, 0, 2, deps=9), r"gpu 0 tb 0 step 2: depends on tb 2 step 9, which does not exist")
    refused(edit_step(base(), 0, 0, 2, depid=0), r"gpu 0 tb 0 step 2: depends on its own threadblock")
    refused(edit_step(base(), 0, 0, 0, deps=3), r"gpu 0 tb 0 step 0: depid=-1 deps=3; write -1/-1")


def test_waited_step_must_have_hasdep():
    # tb 0 step 2 of every gpu waits on tb 2 step 3 (the last re)
    refused(edit_step(base(), 0, 2, 3, hasdep=False),
            r"gpu 0 tb 2 step 3: another step waits on it but hasdep=0")


def test_waiting_on_a_nop_is_refused():
    refused(edit_step(base(), 0, 0, 2, deps=1, depid=2), r"gpu 0 tb 2 step 1: another step waits on this nop")


def test_send_needs_a_send_peer_and_receive_a_recv_peer():
    refused(edit_tb(base(), 0, 0, send=-1), r"gpu 0 tb 0 step 0: s sends but the threadblock has send=-1")
    refused(edit_tb(base(), 0, 0, recv=-1), r"gpu 0 tb 0 step 1: r receives but the threadblock has recv=-1")


def test_peers_must_be_other_ranks():
    refused(edit_tb(base(), 1, 0, send=1), r"gpu 1 tb 0: send=1 must be -1 or another rank in 0..2")
    refused(edit_tb(base(), 1, 0, recv=3), r"gpu 1 tb 0: recv=3 must be -1 or another rank in 0..2")


def test_one_connection_is_driven_by_one_threadblock():
    ir = edit_tb(base(), 0, 1, send=1)  # tb 0 already sends to rank 1 on channel 0
    refused(ir, r"gpu 0 tb 1: tb 0 already uses the send connection with rank 1 on channel 0")


def test_gpu_ids_must_be_0_to_ngpus_minus_1():
    ir = base()
    refused(replace(ir, gpus=(ir.gpus[1], ir.gpus[0], ir.gpus[2])), r"found id 1 at position 0")
    refused(replace(ir, ngpus=4), r"algo ngpus=4 but the IR has 3 gpu elements")


def test_local_ranges_must_fit_their_buffers():
    refused(edit_step(base(), 2, 2, 0, srcoff=3),
            r"gpu 2 tb 2 step 0: src i\[3:4\] runs outside the buffer of 3 chunks")
    refused(edit_gpu(base(), 1, s_chunks=1), r"gpu 1 tb 1 step 1: dst s\[1:2\] runs outside the buffer of 1 chunks")


def test_nop_rules_follow_the_loader():
    ir = base()
    refused(edit_step(ir, 0, 2, 1, depid=-1, deps=-1), r"gpu 0 tb 2 step 1: nop without a dependency")
    refused(edit_step(ir, 0, 2, 2, depid=-1, deps=-1),
            r"gpu 0 tb 2 step 2: follows nop step 1 but has no dependency itself")
    tb = ir.gpus[0].tbs[2]
    trailing = (*tb.steps, Step(len(tb.steps), "nop", "i", -1, "o", -1, 0, 0, 1))
    refused(edit_tb(ir, 0, 2, steps=trailing), r"gpu 0 tb 2 step 4: trailing nop")


def test_algo_level_attributes():
    ir = base()
    refused(replace(ir, collective="reduce_scatter"), r"coll='reduce_scatter' is not a spelling .* use reducescatter")
    refused(replace(ir, collective="alltonext"), r"use one of allreduce, allgather")
    refused(replace(ir, proto="LL64"), r"algo proto='LL64' is unknown")
    refused(replace(ir, name='a"b'), r"algo name 'a\"b': must be 1..255 characters without quotes")
    refused(replace(ir, nchunksperloop=0), r"nchunksperloop=0 must be >= 1")
    refused(replace(ir, min_bytes=10, max_bytes=5), r"maxBytes=5 is below minBytes=10")
    refused(edit_gpu(ir, 0, i_chunks=-1), r"gpu 0: i_chunks=-1 must be >= 0")


def test_coll_spelling_maps_names_to_what_the_loaders_accept():
    assert coll_spelling("ReduceScatter") == coll_spelling("reduce_scatter") == "reducescatter"
    assert coll_spelling("AllGather") == "allgather"
    assert coll_spelling("alltonext") == "custom"


def test_loader_node_table_limit():
    tbs = tuple(Threadblock(t, -1, -1, 0, tuple(Step(i, "cpy", "i", 0, "o", 0, 1) for i in range(250)))
                for t in range(17))
    ir = edit_gpu(base(), 0, tbs=tbs)
    message = refused(ir, r"gpu 0: the loader reads 4271 XML elements for this rank")
    assert str(MAX_XML_NODES) in message


def test_at_most_32_threadblocks_per_channel_on_a_gpu():
    def local_tbs(count: int, channels: int) -> tuple[Threadblock, ...]:
        return tuple(Threadblock(t, -1, -1, t % channels, (Step(0, "cpy", "i", 0, "o", 0, 1),)) for t in range(count))

    ir = replace(base(), nchannels=2)
    validate(edit_gpu(ir, 1, tbs=local_tbs(32, 1)))  # exactly the limit
    validate(edit_gpu(ir, 1, tbs=local_tbs(40, 2)))  # 20 + 20 over two channels
    message = refused(edit_gpu(ir, 1, tbs=local_tbs(33, 1)), r"gpu 1: 33 threadblocks on channel 0")
    assert "at most 32 per channel" in message
