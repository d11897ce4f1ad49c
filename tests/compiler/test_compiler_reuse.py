"""compile_program(reuse=): configurations of one program share the forms up to the schedule, and every IR is
the one a compile without reuse makes."""

import pytest

from collsynth.algorithms.registry import library_programs
from collsynth.compiler import compile_program
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
