"""MSCCL-IR or an MSCCL++ plan per size: the choice, the lowering of the tuner's IR to checked plans, and
`collsynth tune --backends`."""

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.algorithms.registry import build
from collsynth.compiler import compile_program
from collsynth.core.errors import CollsynthError
from collsynth.runtime.plan import execute_plan
from collsynth.topologies import fully_connected, resolve_topology
from collsynth.tune import Evaluator, Grid, tune_sizes
from collsynth.tune.backend import choose_backends, library_plan_candidates, lowered_plans, tuned_backends
from collsynth.tune.candidates import library_candidates

times = st.floats(0.1, 1e4, allow_nan=False)


@given(st.lists(st.tuples(times, times, times), min_size=1, max_size=6))
def test_choice_is_the_fastest_of_the_allowed_backends(rows):
    sizes = [1 << (10 + k) for k in range(len(rows))]
    ir = {"ir:a": [r[0] for r in rows], "ir:b": [r[1] for r in rows]}
    plans = {"plan:p": [r[2] for r in rows]}
    for backends in (("ir",), ("mscclpp",), ("ir", "mscclpp")):
        for choice, row in zip(choose_backends(sizes, ir, plans, backends), rows, strict=True):
            allowed = (list(row[:2]) if "ir" in backends else []) + ([row[2]] if "mscclpp" in backends else [])
            assert choice.time_us == min(allowed)
            assert choice.backend in backends
            if backends == ("ir", "mscclpp") and row[2] == min(row[:2]):
                assert choice.backend == "ir"  # ties stay with the deployed runtime


def test_sizes_with_no_finite_time_are_skipped_and_unknown_backends_refused():
    choices = choose_backends([1, 2], {"ir:a": [math.inf, 3.0]}, {"plan:p": [math.inf, 5.0]})
    assert [(c.size_bytes, c.backend) for c in choices] == [(2, "ir")]
    with pytest.raises(CollsynthError, match="unknown backend 'nccl'"):
        choose_backends([1], {}, {}, ("nccl",))


def test_lowered_plans_pass_the_interpreter_for_every_protocol():
    topology = resolve_topology("ndv4")
    ir = compile_program(build("ring_allreduce", topology, protocol="LL128"))
    plans, refused = lowered_plans(ir, topology, "ring")
    assert refused == [] and {p.plan["protocol"] for p in plans} == {"Simple", "LL"}
    assert len({p.name for p in plans}) == len(plans)
    for p in plans:
        assert execute_plan(p.plan).passed and p.origin == "ring"


def test_library_plans_are_allreduce_only():
    topology = resolve_topology("h100_nvswitch")
    names = {p.name for p in library_plan_candidates(topology, "allreduce")}
    assert {"plan:mscclpp_1pa_ll", "plan:mscclpp_2pa_memory", "plan:mscclpp_2pa_switch"} <= names
    assert library_plan_candidates(topology, "allgather") == []
    out_of_place = library_plan_candidates(topology, "allreduce", inplace=False)
    assert out_of_place and all(not p.plan["inplace"] and execute_plan(p.plan).passed for p in out_of_place)


def test_tuned_run_against_plans():
    topology = fully_connected(4)
    candidates = [c for c in library_candidates(topology, "allreduce") if "ring" in c.name]
    evaluator = Evaluator(topology, candidates)
    sizes = [1 << 10, 1 << 20]
    run = tune_sizes(evaluator, "allreduce", sizes, Grid(protocols=("Simple", "LL"), instances=(1,)))
    choices, refused = tuned_backends(run, evaluator)
    assert [c.size_bytes for c in choices] == sizes and refused == []
    for choice, result in zip(choices, run.results, strict=True):
        assert choice.best_ir is not None and choice.best_ir[1] == result.timing.time_us
        assert choice.best_plan is not None
        assert choice.time_us == min(choice.best_ir[1], choice.best_plan[1])
    only_ir, _ = tuned_backends(run, evaluator, ("ir",))
    assert all(c.backend == "ir" and c.best_plan is None for c in only_ir)


def test_tune_cli_prints_the_runtime_per_size(cli_runner):
    from collsynth.cli import main

    result = cli_runner.invoke(main, ["tune", "fully_connected:4", "allreduce", "--sizes", "1KB", "--no-synth",
                                      "--backends", "ir,mscclpp", "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [c["size"] for c in payload["backends"]] == [1024]
    assert payload["backends"][0]["backend"] in ("ir", "mscclpp")
    bad = cli_runner.invoke(main, ["tune", "fully_connected:4", "allreduce", "--sizes", "1KB", "--backends", "nccl"])
    assert bad.exit_code == 2 and "--backends" in bad.output and "Traceback" not in bad.output
