import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.core.limits import FIFO_SLOTS
from collsynth.core.targets import TARGETS
from collsynth.ir import Algo, Gpu, Step, Threadblock
from collsynth.ir.deadlock import bounded_deadlock
from collsynth.runtime import execute
from collsynth.runtime.result import DEADLOCK


def exchange(orders: tuple[str, str]) -> Algo:
    """Two ranks, one threadblock each, sending input chunk k and receiving into output chunk k; `orders`
    says per rank in which order its sends ('s') and receives ('r') run."""
    n = orders[0].count("s")
    gpus = []
    for rank, order in enumerate(orders):
        sent = received = 0
        steps = []
        for i, kind in enumerate(order):
            k = sent if kind == "s" else received
            steps.append(Step(i, kind, "i", k, "o", k, 1))
            sent, received = sent + (kind == "s"), received + (kind == "r")
        gpus.append(Gpu(rank, n, n, 0, (Threadblock(0, 1 - rank, 1 - rank, 0, tuple(steps)),)))
    return Algo("exchange", "custom", "Simple", 1, n, 2, False, tuple(gpus))


def test_two_peers_that_both_send_more_than_the_slots_before_receiving_deadlock():
    many = "s" * (FIFO_SLOTS + 1) + "r" * (FIFO_SLOTS + 1)
    ir = exchange((many, many))
    assert execute(ir, postcondition=False, fifo_capacity=None).passed  # unbounded FIFOs hide it
    message = bounded_deadlock(ir, FIFO_SLOTS)
    assert message is not None
    assert message.startswith(f"deadlock with connections of {FIFO_SLOTS} message slot(s): 2 threadblock(s)")
    assert f"step {FIFO_SLOTS} (s) waits for a free slot on its connection" in message
    result = execute(ir, postcondition=False)  # the interpreter's default is the runtime's slots
    assert result.failure == DEADLOCK
    assert result.message.startswith(f"2 threadblock(s) can never finish with connections of {FIFO_SLOTS} message")


def test_as_many_sends_as_slots_fit():
    fits = "s" * FIFO_SLOTS + "r" * FIFO_SLOTS
    ir = exchange((fits, fits))
    assert bounded_deadlock(ir, FIFO_SLOTS) is None
    assert execute(ir, postcondition=False).passed


def test_one_side_receiving_first_breaks_the_cycle():
    ir = exchange(("s" * 12 + "r" * 12, "r" * 12 + "s" * 12))
    assert bounded_deadlock(ir, 1) is None


def test_every_target_has_the_nccl_fifo_depth():
    assert {t.fifo_slots for t in TARGETS.values()} == {FIFO_SLOTS} == {8}


def test_capacity_below_one_is_refused():
    with pytest.raises(ValueError, match="capacity=0"):
        bounded_deadlock(exchange(("sr", "sr")), 0)


def orders(n: int) -> st.SearchStrategy[str]:
    return st.permutations("s" * n + "r" * n).map("".join)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5).flatmap(lambda n: st.tuples(orders(n), orders(n))), st.integers(1, 4))
def test_the_control_run_agrees_with_the_reference_interpreter(pair, capacity):
    ir = exchange(pair)
    interpreted = execute(ir, postcondition=False, fifo_capacity=capacity)
    assert (bounded_deadlock(ir, capacity) is None) == interpreted.passed
    assert interpreted.passed or interpreted.failure == DEADLOCK
    # Independent rule for this shape: a rank blocks on its (capacity+1)-th unanswered send only when it has
    # sent capacity more than the other received; the run finishes iff no prefix needs more than capacity.
    assert interpreted.passed == _exchange_finishes(pair, capacity)


def _exchange_finishes(pair: tuple[str, str], capacity: int) -> bool:
    """Step both ranks greedily under the same rules, one step at a time (a third, independent model)."""
    pcs, sent = [0, 0], [0, 0]
    received = [0, 0]
    progress = True
    while progress:
        progress = False
        for rank in (0, 1):
            if pcs[rank] == len(pair[rank]):
                continue
            kind, other = pair[rank][pcs[rank]], 1 - rank
            if kind == "s" and sent[rank] - received[other] < capacity:
                sent[rank] += 1
            elif kind == "r" and sent[other] > received[rank]:
                received[rank] += 1
            else:
                continue
            pcs[rank] += 1
            progress = True
    return pcs == [len(pair[0]), len(pair[1])]
