"""The intermediate forms' bookkeeping: one Renumbering remaps every instr's edges in the DAG, Placement.of
derives each instr's threadblock and step, compile_program alone pauses the cyclic collector, and the IR's
steps made without Step's __init__ are the same steps."""

import gc
import inspect
from dataclasses import FrozenInstanceError, fields

import pytest

from collsynth.collectives import make_collective
from collsynth.compiler import CompileError, Placement, compile_program, trace_to_dag
from collsynth.compiler.dag import STEP_FIELDS, InstrDAG, Renumbering
from collsynth.compiler.lowering import step_of_fields
from collsynth.compiler.placement import TbPlan
from collsynth.ir import Step
from collsynth.language import Buffer, ProgramBuilder
from collsynth.topologies import fully_connected


def relay_dag() -> InstrDAG:
    b = ProgramBuilder("relay", fully_connected(3), make_collective("allgather", 3))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)  # 0: s@0  1: r@1
    b.chunk(1, Buffer.output, 0).copy(2, Buffer.output, 0)  # 2: s@1 after 1  3: r@2
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 2)  # 4: s@0 queued after 0  5: r@1 queued after 1
    b.chunk(2, Buffer.input, 0).copy(1, Buffer.output, 0)  # 6: s@2  7: r@1 overwrites what 2 read (after 2)
    return trace_to_dag(b.build())


def test_renumbering_moves_every_edge_with_the_instrs() -> None:
    dag = relay_dag()
    order = [0, 4, 6, 1, 5, 2, 7, 3]
    moved = dag.renumbered(Renumbering(len(order), order), [dag.instrs[i] for i in order])
    new = {old: k for k, old in enumerate(order)}
    for k, old in enumerate(order):
        ins, was = moved.instrs[k], dag.instrs[old]
        assert ins[:STEP_FIELDS] == was[:STEP_FIELDS]
        assert ins.preds == tuple(sorted(new[p] for p in was.preds))
        assert ins.after == tuple(sorted(new[p] for p in was.after))
        assert ins.send_to == (new[was.send_to] if was.send_to >= 0 else -1)


def test_renumbering_merges_a_group_into_its_first_member() -> None:
    dag = relay_dag()  # merge the receive 1 with the send 2 it feeds: the edge between them disappears
    units = [0, 1, 3, 4, 5, 6, 7]
    merged = dag.renumbered(Renumbering(len(dag.instrs), units, {1: (1, 2)}),
                            [dag.instrs[u] for u in units])
    assert [ins.send_to for ins in merged.instrs] == [1, 2, -1, 4, -1, 6, -1]  # 0 -> the group, the group -> old 3
    assert [ins.preds for ins in merged.instrs] == [(), (), (), (), (), (), (1,)]  # old 2's wait for old 1: inside
    assert [ins.after for ins in merged.instrs] == [(), (), (), (0,), (1,), (), ()]  # old 5 behind old 1: the group


def test_placement_of_derives_threadblock_and_step_and_refuses_a_lost_instr() -> None:
    dag = relay_dag()
    tbs = ((TbPlan(1, -1, 0, (0, 4)),), (TbPlan(2, 0, 0, (1, 2, 5)), TbPlan(-1, 2, 0, (7,))),
           (TbPlan(1, 1, 0, (3, 6)),))
    placed = Placement.of(dag, tbs)
    assert [ref.tb for ref in placed.at] == [0, 0, 0, 0, 0, 0, 0, 1]
    assert [ref.step for ref in placed.at] == [0, 0, 1, 0, 1, 2, 1, 0]
    with pytest.raises(CompileError, match="exactly once"):
        Placement.of(dag, (tbs[0], (TbPlan(2, 0, 0, (1, 2, 2)), tbs[1][1]), tbs[2]))
    with pytest.raises(CompileError, match="exactly once"):
        Placement.of(dag, (tbs[0], (TbPlan(2, 0, 0, (1, 2, 8)), tbs[1][1]), tbs[2]))


def test_the_collector_is_paused_during_the_compile_and_restored_after() -> None:
    b = ProgramBuilder("relay", fully_connected(3), make_collective("allgather", 3))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
    seen: list[bool] = []
    assert gc.isenabled()
    compile_program(b.build(), after_each=lambda name, form: seen.append(gc.isenabled()))
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        compile_program(b.build())
        assert not gc.isenabled()  # a caller's own pause is kept
    finally:
        gc.enable()


def test_the_collector_comes_back_when_the_compile_fails() -> None:
    b = ProgramBuilder("bad", fully_connected(3), make_collective("allgather", 3))
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0)
    with pytest.raises(CompileError):
        compile_program(b.build(), instances=40)  # 40 channels: more than MSCCL has
    assert gc.isenabled()


def test_step_of_fields_makes_the_step_that_step_makes() -> None:
    names = [f.name for f in fields(Step)]
    assert list(inspect.signature(step_of_fields).parameters) == names  # a new Step field needs a slot here too
    values = (3, "rrc", "i", 4, "s", 5, 2, 1, 7, True)
    made = step_of_fields(*values)
    assert type(made) is Step and made == Step(*values) and hash(made) == hash(Step(*values))
    assert [getattr(made, name) for name in names] == list(values)
    with pytest.raises(FrozenInstanceError):
        made.cnt = 1  # type: ignore[misc]
