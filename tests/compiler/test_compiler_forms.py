"""`compile_program(after_each=)` sees every intermediate form in pass order; each form prints readably and
passes its own checker (the invariants the next pass relies on)."""

import pytest

from collsynth.algorithms.registry import library_programs
from collsynth.compiler import (
    ChannelledDAG,
    Dependencies,
    InstrDAG,
    Placement,
    Schedule,
    TbProgram,
    compile_program,
)
from collsynth.ir import RECEIVING_TYPES, SENDING_TYPES, Algo
from collsynth.language.timed import lower_timed
from collsynth.topologies import resolve_topology


def check_dag(dag: InstrDAG) -> None:
    for i, ins in enumerate(dag.instrs):
        assert all(p < i for p in ins.preds) and all(p < i for p in ins.after)
        j = ins.send_to
        assert (j > i and dag.instrs[j].kind in RECEIVING_TYPES) if ins.kind in SENDING_TYPES else j == -1


def check_channels(cdag: ChannelledDAG) -> None:
    check_dag(cdag.dag)
    assert len(cdag.channel) == len(cdag.dag.instrs)
    for ins, ch in zip(cdag.dag.instrs, cdag.channel, strict=True):
        assert ch >= 0 or ins.kind not in SENDING_TYPES | RECEIVING_TYPES


def check_schedule(sched: Schedule) -> None:
    assert sorted(sched.order) == list(range(len(sched.dag.instrs)))
    position = {i: k for k, i in enumerate(sched.order)}
    for i, ins in enumerate(sched.dag.instrs):
        assert all(position[p] < position[i] for p in (*ins.preds, *ins.after))


def check_placement(placed: Placement) -> None:
    seen = []
    at = placed.at
    for rank, tbs in enumerate(placed.tbs):
        for t, tb in enumerate(tbs):
            for s, i in enumerate(tb.instrs):
                assert placed.dag.instrs[i].rank == rank and at[i] == (t, s)
                seen.append(i)
    assert sorted(seen) == list(range(len(placed.dag.instrs)))


def check_dependencies(deps: Dependencies) -> None:
    check_placement(deps.placement)
    tbs = deps.placement.tbs
    assert [[len(w) for w in rank_waits] for rank_waits in deps.waits] == [[len(tb.instrs) for tb in rank_tbs]
                                                                         for rank_tbs in tbs]
    for rank, rank_waits in enumerate(deps.waits):
        for mine, tb_waits in enumerate(rank_waits):
            for waits in tb_waits:
                assert all(t != mine and 0 <= s < len(tbs[rank][t].instrs) for t, s in waits)


def check_tbprogram(tbprog: TbProgram) -> None:
    for tbs in tbprog.gpus:
        for tb in tbs:
            assert all(len(step.deps) <= 1 for step in tb.steps)  # after insert_nops: one wait per step


CHECKERS = {InstrDAG: check_dag, ChannelledDAG: check_channels, Schedule: check_schedule, Placement: check_placement,
            Dependencies: check_dependencies, TbProgram: check_tbprogram, Algo: lambda ir: None}


def compiled_forms(program, **options):
    forms = []
    compile_program(program, after_each=lambda name, form: forms.append((name, form)), **options)
    return forms


@pytest.mark.parametrize("topology, collective", [("ring:8", "allreduce"), ("dgx1", "allgather"),
                                                  ("fully_connected:8", "alltoall")])
def test_every_form_passes_its_checker_and_prints(topology, collective):
    for _, program in library_programs(resolve_topology(topology), collective):
        forms = compiled_forms(program)
        names = [name for name, _ in forms]
        assert names[0] == "trace_to_dag" and names[-1] == "lower_to_ir"
        assert names.index("schedule") < names.index("assign_threadblocks") < names.index("insert_dependencies")
        for name, form in forms:
            CHECKERS[type(form)](form)
            text = str(form)
            assert text and "\n" in text, name


def test_timed_program_forms():
    from collsynth.collectives import make_collective
    from collsynth.synth.cluster.greedy import greedy

    topo = resolve_topology("torus:3x3")
    program = lower_timed(greedy(topo, make_collective("allgather", 9), 1 << 20).algorithm)
    forms = compiled_forms(program)
    assert "order_messages" not in [name for name, _ in forms]  # timed programs keep their message order
    for _, form in forms:
        CHECKERS[type(form)](form)
