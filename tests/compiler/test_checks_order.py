"""check_ir's all-steps-at-once order check (_in_order) says yes only where the step-by-step checks find nothing:
on compiled IRs, and never on an IR with a planted fault (those go to the step-by-step checks, which name it)."""

import pytest

from collsynth.algorithms.ring import ring_allreduce
from collsynth.compiler import compile_program
from collsynth.compiler.checks import _in_order
from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.runtime import samples
from collsynth.topologies import ring


def _algo(tbs0, tbs1):
    return Algo("hand", "allgather", "Simple", 1, 2, 2, False,
                (Gpu(0, 1, 2, 0, tuple(tbs0)), Gpu(1, 1, 2, 0, tuple(tbs1))))


VALID = [compile_program(ring_allreduce(ring(4))), compile_program(ring_allreduce(ring(3)), instances=3),
         samples.ring_allreduce(5, channels=3), samples.pairwise_alltoall(4)]


@pytest.mark.parametrize("ir", VALID)
def test_valid_irs_are_in_order(ir):
    assert _in_order(ir)


SEND, RECV = Step(0, "s", "i", 0, "i", 0, 1), Step(0, "r", "o", 0, "o", 0, 1)
FAULTS = {
    "cycle": _algo([Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 1, 0),)),
                    Threadblock(1, -1, 1, 0, (Step(0, "r", "o", 1, "o", 1, 1, -1, -1, True),))],
                   [Threadblock(0, 0, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 1, 0),)),
                    Threadblock(1, -1, 0, 0, (Step(0, "r", "o", 0, "o", 0, 1, -1, -1, True),))]),
    "sizes": _algo([Threadblock(0, 1, -1, 0, (SEND,))],
                   [Threadblock(0, -1, 0, 0, (Step(0, "r", "o", 0, "o", 0, 2),))]),
    "missing receive": _algo([Threadblock(0, 1, -1, 0, (SEND, SEND))], [Threadblock(0, -1, 0, 0, (RECV,))]),
    "two senders": _algo([Threadblock(0, 1, -1, 0, (SEND,)), Threadblock(1, 1, -1, 0, (SEND,))],
                         [Threadblock(0, -1, 0, 0, (RECV, RECV))]),
    "wait for a missing step": _algo([Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 0, 5),))],
                                     [Threadblock(0, -1, 0, 0, (RECV,))]),
}


@pytest.mark.parametrize("name", sorted(FAULTS))
def test_a_planted_fault_is_never_in_order(name):
    assert not _in_order(FAULTS[name])


# Numbered steps whose `s` is not their index: the deadlock check's graph (flags: published `s`) has no cycle, but
# the wait of gpu 0's send for step 1 of its threadblock 1 (the receive) closes one in the order check's graph.
NUMBERED = _algo([Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 1, 1),)),
                  Threadblock(1, -1, 1, 0, (Step(7, "cpy", "i", 0, "o", 0, 1, -1, -1, True),
                                            Step(8, "r", "o", 1, "o", 1, 1)))],
                 [Threadblock(0, 0, -1, 0, (Step(0, "s", "i", 0, "i", 0, 1, 1, 0),)),
                  Threadblock(1, -1, 0, 0, (Step(0, "r", "o", 0, "o", 0, 1, -1, -1, True),))])


@pytest.mark.parametrize("slots", [1, 8])
def test_the_deadlock_graph_shortcut_gives_the_same_answer(slots):
    """With `slots`, _in_order may take the deadlock check's answer (collsynth.ir.deadlock.completes): never a
    different one, on valid IRs and planted faults, and not where a step's `s` is not its index."""
    from collsynth.ir.deadlock import completes

    assert completes(NUMBERED, slots) and not _in_order(NUMBERED)
    for ir in [*VALID, *FAULTS.values(), NUMBERED]:
        assert _in_order(ir, slots) == _in_order(ir)
