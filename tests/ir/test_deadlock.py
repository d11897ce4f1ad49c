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


@st.composite
def control_programs(draw: st.DrawFn) -> Algo:
    """Random IRs of 2-3 GPUs: threadblock t of every GPU runs channel t (one threadblock per connection side),
    steps are sends, receives, forwards, local copies and nops with random dependency waits."""
    ngpus = draw(st.integers(2, 3))
    ntbs = draw(st.integers(1, 2))
    gpus = []
    for g in range(ngpus):
        tbs = []
        for t in range(ntbs):
            peers = [p for p in range(ngpus) if p != g]
            send, recv = draw(st.sampled_from(peers)), draw(st.sampled_from(peers))
            kinds = draw(st.lists(st.sampled_from(["s", "r", "rcs", "cpy", "nop"]), min_size=0, max_size=8))
            steps = []
            for s, kind in enumerate(kinds):
                depid, deps = -1, -1
                if draw(st.integers(0, 3)) == 0:
                    depid, deps = draw(st.integers(0, ntbs - 1)), draw(st.integers(-1, 8))
                steps.append(Step(s, kind, "i", 0, "o", 0, 1, depid, deps, draw(st.booleans())))
            tbs.append(Threadblock(t, send, recv, t, tuple(steps)))
        gpus.append(Gpu(g, 1, 1, 0, tuple(tbs)))
    return Algo("random", "custom", "Simple", ntbs, 1, ngpus, False, tuple(gpus))


@st.composite
def ring_programs(draw: st.DrawFn) -> Algo:
    """Random IRs that finish with unbounded connections: threadblock t of GPU g sends to g+1 and receives from
    g-1 on channel t; steps are appended in one global order (a receive after its send, a wait on a step already
    appended), so only the bounded slots (or a rare wait on a later step) can stop them."""
    ngpus, ntbs = draw(st.integers(2, 3)), draw(st.integers(1, 2))
    steps: dict[tuple[int, int], list[list]] = {(g, t): [] for g in range(ngpus) for t in range(ntbs)}
    pending: list[tuple[int, int]] = []  # receives owed, in send order per connection
    for _ in range(draw(st.integers(0, 24))):
        g, t = draw(st.integers(0, ngpus - 1)), draw(st.integers(0, ntbs - 1))
        action = draw(st.sampled_from(["s", "s", "r", "r", "cpy", "wait"]))
        if action == "r":
            owed = [k for k, (h, u) in enumerate(pending) if (h, u) not in [pending[j] for j in range(k)]]
            if owed:
                h, u = pending.pop(draw(st.sampled_from(owed)))
                steps[(h, u)].append(["r", -1, -1, False])
            continue
        depid, deps = -1, -1
        if action == "wait":
            other = [(u, len(steps[(g, u)]) - 1) for u in range(ntbs) if u != t and steps[(g, u)]]
            if not other:
                continue
            depid, deps = draw(st.sampled_from(other))
            if draw(st.integers(0, 9)) == 0:
                deps += 1  # a wait on a step not appended yet: it may never come
            steps[(g, depid)][min(deps, len(steps[(g, depid)]) - 1)][3] = True
        steps[(g, t)].append([action if action != "wait" else "cpy", depid, deps, False])
        if action == "s":
            pending.append(((g + 1) % ngpus, t))
    for h, u in pending:
        steps[(h, u)].append(["r", -1, -1, False])
    gpus = tuple(Gpu(g, 1, 1, 0, tuple(
        Threadblock(t, (g + 1) % ngpus, (g - 1) % ngpus, t, tuple(
            Step(s, kind, "i", 0, "o", 0, 1, depid, deps, hasdep)
            for s, (kind, depid, deps, hasdep) in enumerate(steps[(g, t)])))
        for t in range(ntbs))) for g in range(ngpus))
    return Algo("ring", "custom", "Simple", ntbs, 1, ngpus, False, gpus)


@settings(max_examples=300, deadline=None)
@given(st.one_of(control_programs(), ring_programs()), st.integers(1, 3))
def test_the_graph_decision_agrees_with_the_replay(ir, capacity):
    """Kahn's algorithm over the waits decides exactly what the step-by-step replay decides."""
    from collsynth.ir.deadlock import _replay, completes

    assert completes(ir, capacity) == (_replay(ir, capacity) is None)


def test_a_connection_of_two_threadblocks_is_left_to_the_replay():
    """Two threadblocks sending on one connection share its slots: the graph does not model that, so the replay
    decides (and both agree with the reference interpreter)."""
    from collsynth.ir.deadlock import completes

    sender = Gpu(0, 2, 2, 0, (Threadblock(0, 1, -1, 0, (Step(0, "s", "i", 0, "o", 0, 1),)),
                              Threadblock(1, 1, -1, 0, (Step(0, "s", "i", 1, "o", 1, 1),))))
    receiver = Gpu(1, 2, 2, 0, (Threadblock(0, -1, 0, 0, (Step(0, "r", "i", 0, "o", 0, 1),
                                                           Step(1, "r", "i", 1, "o", 1, 1))),))
    ir = Algo("shared", "custom", "Simple", 1, 2, 2, False, (sender, receiver))
    assert not completes(ir, 1)
    assert bounded_deadlock(ir, 1) is None
