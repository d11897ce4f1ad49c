"""One message per step and link: lowering with merge='contiguous' (slot order) and merge='stage' (through
scratch); every lowered + compiled program passes the reference interpreter (hypothesis property)."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_lower import ALGORITHMS

from collsynth.collectives import make_collective
from collsynth.compiler import compile_program, instance_collective
from collsynth.ir import SENDING_TYPES
from collsynth.language.lower import LoweringError, lower_to_program
from collsynth.runtime import execute
from collsynth.schedule import Algorithm, Send, Step, verify
from collsynth.topologies import Topology
from collsynth.topologies.model import links_from_matrix


def sends_between(ir, src: int, dst: int) -> list:
    return [s for tb in ir.gpus[src].tbs if tb.send == dst for s in tb.steps if s.type in SENDING_TYPES]


def double_link_allgather() -> Algorithm:
    """Two ranks on a double link; each sends both of its chunks in one step, the higher one first."""
    topo = Topology("pair2", 2, links_from_matrix([[0, 2], [2, 0]]))
    sends = (Send(1, 0, 1), Send(0, 0, 1), Send(3, 1, 0), Send(2, 1, 0))
    return Algorithm("ag2", topo, make_collective("allgather", 2, 2), (Step(1, sends),))


def relay_allgather() -> Algorithm:
    """Rank 0 forwards its own chunk and rank 2's (not contiguous: input slot 0, output slot 2) to rank 1."""
    topo = Topology("tri", 3, links_from_matrix([[0, 2, 1], [2, 0, 1], [1, 1, 0]]))
    steps = (
        Step(1, (Send(2, 2, 0), Send(1, 1, 2), Send(0, 0, 2))),
        Step(1, (Send(0, 0, 1), Send(2, 0, 1), Send(1, 1, 0))),
    )
    return Algorithm("relay", topo, make_collective("allgather", 3), steps)


def test_a_steps_chunks_on_one_link_are_one_message():
    algorithm = double_link_allgather()
    verify(algorithm)
    ir = compile_program(lower_to_program(algorithm))
    for src, dst in ((0, 1), (1, 0)):
        sends = sends_between(ir, src, dst)
        assert [s.cnt for s in sends] == [2], sends
    assert execute(ir, "cpu").passed


def test_staging_makes_non_contiguous_sends_one_message():
    algorithm = relay_allgather()
    verify(algorithm)
    plain = compile_program(lower_to_program(algorithm))
    staged = compile_program(lower_to_program(algorithm, merge="stage"))
    assert len(sends_between(plain, 0, 1)) == 2
    assert [s.cnt for s in sends_between(staged, 0, 1)] == [2]
    for ir in (plain, staged):
        assert execute(ir, "cpu").passed


def test_unknown_merge_mode_is_refused():
    with pytest.raises(LoweringError, match="merge must be"):
        lower_to_program(relay_allgather(), merge="fast")


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("pair", [True, False])
def test_staged_library_of_shapes_passes_interpreter(name, pair):
    algorithm = ALGORITHMS[name]()
    for fusion in (True, False):
        ir = compile_program(lower_to_program(algorithm, merge="stage"), instr_fusion=fusion, pair_threadblocks=pair)
        result = execute(ir, "cpu")
        assert result.passed, f"{name} fusion={fusion} pair={pair}: {result.message}"


@st.composite
def random_gathers(draw):
    """A random AllGather (or Gather) schedule on a random graph with single and double links: every step
    each link carries up to its bandwidth of chunks its source holds and its destination lacks."""
    n = draw(st.integers(2, 4))
    matrix = [[0 if i == j else draw(st.sampled_from([1, 2])) for j in range(n)] for i in range(n)]
    topo = Topology("rand", n, links_from_matrix(matrix))
    chunks = draw(st.integers(1, 3))
    kind = draw(st.sampled_from(["allgather", "gather"]))
    coll = make_collective(kind, n, chunks, root=0 if kind == "gather" else None)
    holds = {c: {c // chunks} for c in range(n * chunks)}
    steps = []
    for _ in range(draw(st.integers(0, 4))):
        sends = []
        for src in range(n):
            for dst in range(n):
                if src == dst:
                    continue
                movable = [c for c in sorted(holds) if src in holds[c] and dst not in holds[c]]
                picked = draw(st.lists(st.sampled_from(movable), max_size=matrix[src][dst], unique=True)) \
                    if movable else []
                sends += [Send(c, src, dst) for c in picked]
        if not sends:
            break
        sends = draw(st.permutations(sends))
        for s in sends:
            holds[s.chunk].add(s.dst)
        steps.append(Step(1, tuple(sends)))
    if any(not coll.post[c] <= holds[c] for c in holds):
        # finish directly from the original owner (a link exists between every pair)
        steps.append(Step(3, tuple(Send(c, c // chunks, d) for c in holds for d in sorted(coll.post[c] - holds[c]))))
    return Algorithm("random", topo, coll, tuple(steps)), draw(st.sampled_from(["contiguous", "stage"])), \
        draw(st.booleans()), draw(st.booleans()), draw(st.integers(1, 2)), draw(st.booleans())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.large_base_example])
@given(random_gathers())
def test_lowered_and_compiled_random_schedules_pass_interpreter(case):
    algorithm, merge, fusion, pair, instances, timed = case
    verify(algorithm)
    program = lower_to_program(algorithm, merge=merge, instances=instances)
    ir = compile_program(program, instr_fusion=fusion, pair_threadblocks=pair, timed_order=timed)
    result = execute(ir, "cpu", collective=instance_collective(algorithm.collective, instances))
    assert result.passed, f"merge={merge} fusion={fusion} pair={pair}: {result.message}\n{algorithm}"
