"""The evaluator's caches (lowered programs, compiled IRs, plans, simulations): every hit is what a fresh
evaluation of that configuration at that size gives, and a miss happens exactly where a key changes."""

from dataclasses import replace

import pytest

import collsynth.tune.evaluate as evaluate_module
from collsynth.collectives import make_collective
from collsynth.schedule import Algorithm, Send, Step
from collsynth.sim.engine import plan
from collsynth.topologies import fully_connected, ring
from collsynth.tune import Config, Evaluator, Grid
from collsynth.tune.candidates import algorithm_candidate, library_candidates

SIZES = (1 << 10, 1 << 24)
GRID = Grid(protocols=("Simple", "LL"), instances=(1, 2))


def ring_allgather(n: int) -> Algorithm:
    steps = [Step(1, tuple(Send((r - k) % n, r, (r + 1) % n) for r in range(n))) for k in range(n - 1)]
    return Algorithm("ring-ag", ring(n), make_collective("allgather", n), tuple(steps))


@pytest.fixture
def topo():
    return ring(4)


@pytest.fixture
def cands(topo):
    return [algorithm_candidate(ring_allgather(4), topo, "allgather")] + library_candidates(topo, "allgather")


def counting(monkeypatch, name):
    """Count the calls evaluate.py makes to one of the functions it imported."""
    calls = []
    real = getattr(evaluate_module, name)

    def counted(*args, **kwargs):
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluate_module, name, counted)
    return calls


def test_every_cached_timing_is_a_fresh_evaluation(topo, cands):
    shared = Evaluator(topo, cands)
    configs = [c for cand in cands for c in GRID.every(cand)]
    for size in SIZES:  # one evaluator across sizes, protocols and resources, as tune_sizes uses it
        for config in configs:
            fresh = Evaluator(topo, cands).time(config, size)
            assert shared.time(config, size) == fresh, config.label()
    assert shared.evaluations == len(configs) * len(SIZES)


def test_configurations_with_one_plan_share_one_simulation(topo, cands, monkeypatch):
    evaluator = Evaluator(topo, cands)
    name = cands[0].name
    contiguous, stage = Config(name, "Simple", 1, "contiguous"), Config(name, "Simple", 1, "stage")
    # on a ring every step sends one chunk per link: both merge modes compile to the same plan
    assert plan(evaluator.ir(contiguous), topo) == plan(evaluator.ir(stage), topo)
    simulations = counting(monkeypatch, "simulate")
    first, second = evaluator.time(contiguous, SIZES[0]), evaluator.time(stage, SIZES[0])
    assert first == second and len(simulations) == 1
    assert evaluator.evaluations == 2  # the search's cost counts configurations, not simulations
    evaluator.time(stage, SIZES[1])  # another size: simulated
    assert len(simulations) == 2


def test_plans_are_made_per_protocol_once_for_every_size(topo, cands, monkeypatch):
    evaluator = Evaluator(topo, cands)
    plans = counting(monkeypatch, "plan")
    simple, ll = Config(cands[0].name, "Simple", 2), Config(cands[0].name, "LL", 2)
    times = {(c.protocol, size): evaluator.time(c, size).time_us for size in SIZES for c in (simple, ll)}
    assert len(plans) == 2  # one per protocol (LL scales the links' alpha and beta), none per size
    assert times[("Simple", SIZES[0])] != times[("LL", SIZES[0])]
    assert times[("Simple", SIZES[0])] != times[("Simple", SIZES[1])]


def test_lowering_is_shared_by_configurations_that_only_compile_differently(topo, cands, monkeypatch):
    evaluator = Evaluator(topo, cands)
    lowerings = counting(monkeypatch, "lower_to_program")
    base = Config(cands[0].name, "Simple", 2, "contiguous")
    for config in (base, replace(base, fusion=False), replace(base, pair_threadblocks=False),
                   replace(base, protocol="LL")):
        evaluator.ir(config)
    evaluator.ir(replace(base, instances=1))  # the compiler sets the instance count
    assert len(lowerings) == 1  # lower_to_program reads the algorithm and merge mode only
    evaluator.ir(replace(base, merge="stage"))
    assert len(lowerings) == 2
    fresh = Evaluator(topo, cands)  # a cached lowering compiles to what a fresh one does
    assert evaluator.ir(replace(base, fusion=False)) == fresh.ir(replace(base, fusion=False))
    assert evaluator.ir(replace(base, instances=1)) == Evaluator(topo, cands).ir(replace(base, instances=1))


def test_a_lowering_does_not_depend_on_the_instance_count(cands):
    """Why the evaluator lowers once for every instance count: only the program's `instances` field differs."""
    from collsynth.language.lower import lower_to_program

    lowered = {k: lower_to_program(cands[0].algorithm, instances=k) for k in (1, 2, 3)}  # one line: same locations
    assert lowered[2] == replace(lowered[1], instances=2) and lowered[3] == replace(lowered[1], instances=3)


def test_a_subset_shares_every_cache(topo, cands, monkeypatch):
    evaluator = Evaluator(topo, cands)
    config = Config(cands[1].name, "LL", 2)
    timing = evaluator.time(config, SIZES[0])
    sub = evaluator.subset([cands[1].name])
    calls = {name: counting(monkeypatch, name) for name in ("simulate", "plan", "compile_program", "lower_to_program")}
    assert sub.time(config, SIZES[0]) == timing and sub.ir(config) == evaluator.ir(config)
    assert sub.time(replace(config, protocol="Simple"), SIZES[0]).ok  # same build, new protocol: plan, simulate
    assert {name: len(c) for name, c in calls.items()} == {"simulate": 1, "plan": 1, "compile_program": 0,
                                                           "lower_to_program": 0}


def test_time_below_answers_what_time_answers_and_remembers_a_stop(monkeypatch):
    topo = fully_connected(4)
    sends = tuple(Send(r, r, d) for r in range(4) for d in range(4) if d != r)  # every rank to every other
    cand = algorithm_candidate(Algorithm("direct-ag", topo, make_collective("allgather", 4), (Step(1, sends),)),
                               topo, "allgather")
    config, size = Config(cand.name, "Simple", 1, "stage"), 1 << 26  # 8 tiles: every one simulated
    exact = Evaluator(topo, [cand]).time(config, size).time_us
    evaluator = Evaluator(topo, [cand])
    assert evaluator.time_below(config, size, exact * 2) == exact and evaluator.seen(config, size)
    evaluator = Evaluator(topo, [cand])
    simulations = counting(monkeypatch, "simulate")
    at_least = evaluator.time_below(config, size, exact / 2)  # far below: proved within the run
    assert exact / 2 <= at_least <= exact and not evaluator.seen(config, size)
    assert evaluator.bound(config, size) >= exact / 2  # the proof is kept as a bound ...
    assert evaluator.time_below(config, size, exact / 3) >= exact / 3 and len(simulations) == 1  # ... and reused
    assert evaluator.time(config, size).time_us == exact and len(simulations) == 2  # time() always finishes


@pytest.mark.parametrize("topology", ["ring", "fattree"])
def test_a_bound_derived_from_another_instance_count_is_the_compiled_one(topology, monkeypatch):
    from collsynth.topologies import resolve_topology
    from collsynth.tune.candidates import library_candidates as library

    topo = ring(4) if topology == "ring" else resolve_topology("fattree:4")  # fattree: switch ports
    cands = [algorithm_candidate(replace(ring_allgather(4), topology=topo) if topology == "ring" else
                                 Algorithm("direct-ag", topo, make_collective("allgather", 8), (Step(7, tuple(
                                     Send(r, r, d) for r in range(8) for d in range(8) if d != r)),)),
                                 topo, "allgather")] + library(topo, "allgather")
    grid = Grid(instances=(2, 3, 5))
    compiled = Evaluator(topo, cands)
    derived = Evaluator(topo, cands)
    checked = 0
    for cand in cands:
        for config in grid.every(cand):
            first = replace(config, instances=2)
            derived.ir(first)  # the one count of this variant that is compiled
            for size in (1 << 10, 1 << 30):
                from_two = derived._derived_bound(config, size)
                assert from_two is not None
                assert from_two == compiled.bound(config, size)  # bit for bit
                checked += 1
    assert checked > 50
    # bound_reaches compiles nothing when the derived bound answers, and answers what bound() does
    config = Config(cands[0].name, "Simple", 6, "stage")
    size = 1 << 30
    exact = compiled.bound(config, size)
    compiles = counting(monkeypatch, "compile_program")
    assert derived.bound_reaches(config, size, exact) and derived.bound_reaches(config, size, exact * 0.5)
    assert len(compiles) == 0
    assert not derived.bound_reaches(config, size, exact * 1.5) and len(compiles) == 1  # compiled to say no
    assert Evaluator(topo, cands)._derived_bound(config, size) is None  # nothing compiled: nothing to derive from
    assert derived._derived_bound(replace(config, instances=1), size) is None  # one instance: another front form
