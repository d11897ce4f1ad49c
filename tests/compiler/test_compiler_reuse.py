"""compile_program(reuse=): configurations of one program share the forms up to the schedule, and every IR is
the one a compile without reuse makes."""

import pytest

from collsynth.algorithms.registry import library_programs
from collsynth.compiler import compile_program
from collsynth.core.errors import CollsynthError
from collsynth.topologies import resolve_topology

CONFIGS = [{"instr_fusion": f, "pair_threadblocks": p, "instances": k}
           for k in (1, 2) for f in (True, False) for p in (True, False)]


@pytest.mark.parametrize("topology,collective", [("dgx1", "allgather"), ("ring:8", "allreduce")])
def test_reused_forms_give_the_same_ir_as_a_fresh_compile(topology, collective):
    for _, program in library_programs(resolve_topology(topology), collective):
        reuse: dict = {}
        for options in CONFIGS + CONFIGS:  # the second round comes from the cache
            assert compile_program(program, reuse=reuse, **options) == compile_program(program, **options)


def test_configurations_that_differ_after_the_schedule_share_it_and_every_pass_is_still_seen():
    _, program = next(iter(library_programs(resolve_topology("ring:8"), "allgather")))
    reuse: dict = {}
    seen: list[list[tuple[str, object]]] = []
    for pair in (True, False):
        forms: list[tuple[str, object]] = []
        compile_program(program, reuse=reuse, pair_threadblocks=pair,
                        after_each=lambda name, form, forms=forms: forms.append((name, form)))
        seen.append(forms)
    schedules = [next(form for name, form in forms if name == "schedule") for forms in seen]
    assert schedules[0] is schedules[1]  # made once
    assert [name for name, _ in seen[0]][:3] == ["trace_to_dag", "order_messages", "aggregate_contiguous"]
    assert [name for name, _ in seen[0]] == [name for name, _ in seen[1]]  # every pass, cached or not


def test_a_fusion_change_reuses_the_traced_forms_but_not_the_fused_ones():
    _, program = next(iter(library_programs(resolve_topology("ring:8"), "allgather")))
    reuse: dict = {}
    firsts = []
    for fusion in (True, False):
        forms: dict[str, object] = {}
        compile_program(program, reuse=reuse, instr_fusion=fusion,
                        after_each=lambda name, form, forms=forms: forms.setdefault(name, form))
        firsts.append(forms)
    assert firsts[0]["trace_to_dag"] is firsts[1]["trace_to_dag"]
    assert firsts[0]["schedule"] is not firsts[1]["schedule"]
    assert "fuse_instructions" in firsts[0] and "fuse_instructions" not in firsts[1]


def _dgx1_programs():
    """Library and synthesized DGX-1 programs (both merge modes), the tuner's inputs."""
    from pathlib import Path

    from collsynth.collectives import make_collective
    from collsynth.language.lower import lower_to_program
    from collsynth.schedule.algorithm import Algorithm
    from collsynth.synth import pareto_frontier

    dgx1 = resolve_topology("dgx1")
    allreduce = Algorithm.load(Path(__file__).parents[1] / "language" / "data" / "dgx1-allreduce-c1s2r8.json")
    algorithms = []
    for collective in ("allgather", "reducescatter"):
        front = pareto_frontier(dgx1, make_collective(collective, 8), max_chunks=2, time_limit=60)
        algorithms += [point.algorithm for point in front.frontier if point.algorithm is not None]
    programs = [program for collective in ("allgather", "reducescatter")
                for _, program in library_programs(dgx1, collective)]
    lowered = [lower_to_program(a, merge=m) for a in algorithms for m in ("contiguous", "stage")]
    return [*programs, *lowered, lower_to_program(allreduce)]  # (its stages do not lower as one merge)


# The tuner's grid (the protocol, which the tuner sets after compiling, changes with the instance count)
def _grid(instances):
    return [{"instances": k, "instr_fusion": f, "pair_threadblocks": p, "timed_order": t,
             "aggregate_either_end": e, "protocol": ("Simple", "LL", "LL128")[k % 3]}
            for t in (False, True) for e in (True, False) for f in (True, False) for p in (True, False)
            for k in instances]


def _compiled(program, target, **options):
    """The IR, or the refusal (the tuner skips a configuration the compiler refuses)."""
    try:
        return compile_program(program, target, **options)
    except CollsynthError as exc:
        return f"{type(exc).__name__}: {exc}"


def _check_against_fresh(program, configurations, target=None):
    reuse: dict = {}
    for options in configurations:
        fresh: list[tuple[str, object]] = []
        shared: list[tuple[str, object]] = []
        expected = _compiled(program, target, after_each=lambda n, f, fresh=fresh: fresh.append((n, f)), **options)
        got = _compiled(program, target, reuse=reuse, after_each=lambda n, f, s=shared: s.append((n, f)), **options)
        assert got == expected, (program.name, options)
        assert shared == fresh, (program.name, options)  # every form, in order, equal to the fresh one


@pytest.fixture(scope="module")
def dgx1_programs():
    return _dgx1_programs()


def test_the_tuners_grid_compiles_to_the_fresh_ir_and_shows_the_fresh_forms(dgx1_programs):
    for program in dgx1_programs[-3:]:  # synthesized: ReduceScatter (both merge modes) and AllReduce
        _check_against_fresh(program, _grid((1, 2)))
    _check_against_fresh(dgx1_programs[0], _grid((1, 3))[::5], target="msccl-executor")  # split passes too


@pytest.mark.slow
@pytest.mark.parametrize("target", [None, "msccl-executor"])
def test_the_whole_tuners_grid_compiles_to_the_fresh_ir_and_shows_the_fresh_forms(dgx1_programs, target):
    for program in dgx1_programs:
        _check_against_fresh(program, _grid(range(1, 9)), target)


def test_a_new_instance_count_or_protocol_redoes_only_replication_onward():
    _, program = next(iter(library_programs(resolve_topology("dgx1"), "allgather")))
    reuse: dict = {}
    seen = []
    for options in ({"instances": 1}, {"instances": 2}, {"instances": 3, "protocol": "LL"}):
        forms: dict[str, object] = {}
        compile_program(program, reuse=reuse, aggregate=False,
                        after_each=lambda name, form, forms=forms: forms.setdefault(name, form), **options)
        seen.append(forms)
    for name in ("trace_to_dag", "order_messages", "fuse_instructions", "assign_channels", "schedule",
                 "assign_threadblocks", "insert_dependencies"):
        assert seen[0][name] is seen[1][name] is seen[2][name], name
    assert seen[0]["insert_nops"] != seen[1]["insert_nops"] != seen[2]["insert_nops"]


def test_aggregation_is_shared_by_instance_counts_above_one_but_not_with_one():
    _, program = next(iter(library_programs(resolve_topology("dgx1"), "allgather")))
    reuse: dict = {}
    merged = []
    for instances in (1, 2, 3):
        forms: dict[str, object] = {}
        compile_program(program, reuse=reuse, instances=instances,
                        after_each=lambda name, form, forms=forms: forms.setdefault(name, form))
        merged.append(forms["aggregate_contiguous"])
    assert merged[1] is merged[2] and merged[0] is not merged[1]
