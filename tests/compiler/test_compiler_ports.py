"""order_port_sends: a rank's sends through one switch port (or link) wait for each other in program order."""

from collsynth.collectives import make_collective
from collsynth.compiler import compile_program, trace_to_dag
from collsynth.compiler.ports import order_port_sends
from collsynth.ir import SENDING_TYPES
from collsynth.language.lower import lower_to_program
from collsynth.runtime import execute
from collsynth.schedule import Algorithm, Send, Step, verify
from collsynth.topologies import Topology
from collsynth.topologies.model import Switch, links_from_matrix


def switched_allgather() -> Algorithm:
    """4 ranks, all links; each rank's outgoing links share one switch port; timed sends, one step."""
    links = links_from_matrix([[0 if i == j else 1 for j in range(4)] for i in range(4)])
    ports = tuple(Switch(f"out{r}", frozenset((r, d) for d in range(4) if d != r)) for r in range(4))
    topo = Topology("switched4", 4, links, ports)
    sends = tuple(Send(r, r, d, start_us=float(k)) for r in range(4)
                  for k, d in enumerate(sorted(range(4), key=lambda d: (d - r) % 4)) if d != r)
    return Algorithm("timed", topo, make_collective("allgather", 4), (Step(3, sends),))


def test_sends_through_one_port_are_chained_in_program_order():
    algorithm = switched_allgather()
    verify(algorithm)
    dag = trace_to_dag(lower_to_program(algorithm))
    chained = order_port_sends(dag, algorithm.topology)
    for rank in range(4):
        sends = [i for i, ins in enumerate(dag.instrs) if ins.rank == rank and ins.kind in SENDING_TYPES]
        assert len(sends) == 3
        for before, after in zip(sends, sends[1:], strict=False):
            assert before in chained.instrs[after].preds and before not in dag.instrs[after].preds
    ir = compile_program(lower_to_program(algorithm), timed_order=True)
    assert execute(ir, "cpu").passed


def test_nothing_to_chain_returns_the_same_dag():
    algorithm = switched_allgather()
    dag = trace_to_dag(lower_to_program(algorithm))
    once = order_port_sends(dag, algorithm.topology)
    assert order_port_sends(once, algorithm.topology) is once


def test_timed_schedule_message_runs_grow_only_upwards_unless_asked():
    """Two chunks on one link timed high slot first: a timed schedule keeps them two messages (the first is
    not held back for the second), unless the compile asks for runs that grow at either end (one message)."""
    topo = Topology("pair", 2, links_from_matrix([[0, 1], [1, 0]]))
    coll = make_collective("allgather", 2, 2)  # chunk c of rank r: index 2r + c
    sends = (Send(1, 0, 1, start_us=0.0), Send(0, 0, 1, start_us=5.0), Send(2, 1, 0, start_us=0.0),
             Send(3, 1, 0, start_us=5.0))
    algorithm = Algorithm("timed-pair", topo, coll, (Step(2, sends),))
    verify(algorithm)
    program = lower_to_program(algorithm)
    assert program.options.aggregate_either_end is False

    def sends_of(ir, rank):
        return [s for tb in ir.gpus[rank].tbs for s in tb.steps if s.type in SENDING_TYPES]

    upwards = compile_program(program)
    either = compile_program(program, aggregate_either_end=True)
    assert [s.cnt for s in sends_of(upwards, 0)] == [1, 1]  # slot 1 queued first: no upward run
    assert [s.cnt for s in sends_of(either, 0)] == [2]
    assert [s.cnt for s in sends_of(upwards, 1)] == [2]  # slots 2, 3 in order: one message either way
    assert execute(upwards, "cpu").passed and execute(either, "cpu").passed
