"""insert_dependencies and prune_dependencies by arrays (compiler/deps.py) give the waits of their definitions: per
step, the latest step of every other threadblock of its rank that it depends on, less those an earlier step of its
threadblock already waited for (the one-by-one prune, kept for waits made by hand, is the reference)."""

from collsynth.algorithms.registry import library_programs
from collsynth.collectives import make_collective
from collsynth.compiler import compile_program
from collsynth.compiler.deps import Dependencies, _pruned_one_by_one, insert_dependencies, prune_dependencies
from collsynth.language import Buffer, ProgramBuilder
from collsynth.language.timed import lower_timed
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import fully_connected, resolve_topology


def _placements():
    programs = [lower_timed(greedy(resolve_topology(shape), make_collective("allgather", n), 1 << 20).algorithm)
                for shape, n in (("torus:3x3", 9), ("torus:4x4", 16))]
    for topology, collective in (("ring:8", "allgather"), ("dgx1", "allgather"), ("fully_connected:8", "alltoall"),
                                 ("ring:8", "allreduce")):
        programs += [program for _, program in library_programs(resolve_topology(topology), collective)]
    b = ProgramBuilder("prune", fully_connected(2), make_collective("allgather", 2, 2), threadblock_policy="manual")
    b.chunk(0, Buffer.input, 0).copy(1, Buffer.output, 0, sendtb=0, recvtb=0)
    b.chunk(1, Buffer.output, 0).copy(1, Buffer.output, 2, sendtb=1)  # both wait for the receive on tb 0: the
    b.chunk(1, Buffer.output, 0).copy(1, Buffer.output, 3, sendtb=1)  # second wait is covered by the first
    programs.append(b.build())
    for program in programs:
        for pairing in (True, False):
            forms = {}
            compile_program(program, after_each=forms.__setitem__, pair_threadblocks=pairing)
            yield program.name, forms["insert_dependencies"].placement


def _waits_by_definition(placement):
    dag, tb, step = placement.dag, placement.tb_of.tolist(), placement.step_of.tolist()
    waits = []
    for i, ins in enumerate(dag.instrs):
        latest = {}
        for p in ins.preds:
            if tb[p] != tb[i]:
                latest[tb[p]] = max(latest.get(tb[p], -1), step[p])
        waits.append(tuple(sorted(latest.items())))
    return waits


def test_the_waits_are_those_of_the_definitions():
    pruned_some = kept_all = 0
    for name, placement in _placements():
        made = insert_dependencies(placement)
        expected = _waits_by_definition(placement)
        assert [made.waits_of(i) for i in range(len(placement.dag.instrs))] == expected, name
        pruned = prune_dependencies(made)
        assert pruned.waits == _pruned_one_by_one(made).waits, name
        assert pruned.waits == prune_dependencies(Dependencies(placement, made.waits)).waits  # (no arrays: by loop)
        pruned_some += pruned.count < made.count
        kept_all += pruned.count == made.count
    assert pruned_some and kept_all  # both ways of the arrays' prune are taken


def test_the_inserted_waits_read_and_compare_as_a_plain_dependencies():
    for name, placement in list(_placements())[:4]:
        made = insert_dependencies(placement)  # (its waits are made when first read)
        plain = Dependencies(placement, _waits_per_step(placement, _waits_by_definition(placement)))
        assert made == plain and plain == made and not made != plain, name  # noqa: SIM202 (__ne__ too)
        assert str(made) == str(plain) and made.count == plain.count, name
        other = Dependencies(placement, tuple(tuple(((),) * len(plan.instrs) for plan in tbs) for tbs in placement.tbs))
        assert (made == other) == (plain == other), name


def _waits_per_step(placement, waits):
    return tuple(tuple(tuple(waits[i] for i in plan.instrs) for plan in tbs) for tbs in placement.tbs)
