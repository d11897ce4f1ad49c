"""The tuner: exhaustive over (algorithm, protocol), coordinate descent over resources; against exhaustive
search of the same grid, deterministic, and every configuration it picks runs correctly."""

import math
from dataclasses import replace

import pytest

from collsynth.collectives import make_collective
from collsynth.compiler import compile_program
from collsynth.language.lower import lower_to_program
from collsynth.runtime import execute
from collsynth.schedule import Algorithm, Send, Step
from collsynth.topologies import fully_connected, ring
from collsynth.tune import Candidate, Config, Evaluator, Grid, TuneError, exhaustive_size, tune_size, tune_sizes
from collsynth.tune.candidates import algorithm_candidate, library_candidates, parse_size_range
from collsynth.tune.search import _line_search

SMALL = Grid(protocols=("Simple", "LL"), instances=(1, 2, 3))


def ring_allgather(n: int) -> Algorithm:
    steps = [Step(1, tuple(Send((r - k) % n, r, (r + 1) % n) for r in range(n))) for k in range(n - 1)]
    return Algorithm("ring-ag", ring(n), make_collective("allgather", n), tuple(steps))


def direct_allgather(n: int) -> Algorithm:
    """One step: every rank sends its chunk to every other rank (fully connected)."""
    sends = tuple(Send(r, r, d) for r in range(n) for d in range(n) if d != r)
    return Algorithm("direct-ag", fully_connected(n), make_collective("allgather", n), (Step(1, sends),))


def candidates(topo, algorithms):
    return [algorithm_candidate(a, topo, "allgather") for a in algorithms] + library_candidates(topo, "allgather")


@pytest.mark.parametrize("size", [1 << 10, 1 << 24])
def test_tuner_matches_exhaustive_with_fewer_evaluations(size):
    topo = fully_connected(4)
    cands = candidates(topo, [replace(direct_allgather(4), topology=topo)])
    tuned = tune_size(Evaluator(topo, cands), size, SMALL)
    full = exhaustive_size(Evaluator(topo, cands), size, SMALL)
    assert full.evaluations == sum(len(SMALL.every(c)) for c in cands)
    assert tuned.evaluations < full.evaluations
    assert tuned.timing.time_us <= full.timing.time_us * 1.02
    assert full.timing.time_us == min(t for _, t in full.trace)


def test_tuning_is_deterministic():
    topo = ring(4)
    cands = candidates(topo, [ring_allgather(4)])
    first = tune_size(Evaluator(topo, cands), 1 << 20, SMALL)
    second = tune_size(Evaluator(topo, cands), 1 << 20, SMALL)
    assert first.best == second.best
    assert [c for c, _ in first.trace] == [c for c, _ in second.trace]


def test_picked_configurations_pass_the_interpreter():
    topo = ring(4)
    evaluator = Evaluator(topo, candidates(topo, [ring_allgather(4)]))
    for size in (1 << 10, 1 << 24):
        best = tune_size(evaluator, size, SMALL).best
        assert best is not None
        assert execute(evaluator.ir(best), "cpu").passed


def test_protocol_is_applied_after_compiling_without_changing_the_ir():
    algorithm = ring_allgather(4)
    evaluator = Evaluator(ring(4), [algorithm_candidate(algorithm, ring(4), "allgather")])
    config = Config(evaluator.candidates.__iter__().__next__(), "LL128", 2)
    assert evaluator.ir(config) == compile_program(lower_to_program(algorithm, instances=2, protocol="LL128"))


class _FakeWalk:
    """time(config) = (instances - 5)^2: unimodal in instances, minimum at 5."""

    def __init__(self):
        self.calls = []

    def time(self, config):
        self.calls.append(config.instances)
        return float((config.instances - 5) ** 2)

    def time_below(self, config, limit):
        return self.time(config)

    def bound(self, config):
        return -math.inf  # no lower bound: every step of the walk is timed

    def bound_reaches(self, config, limit):
        return False


def test_line_search_follows_unimodal_axis_to_its_minimum():
    walk = _FakeWalk()
    start = Config("a", instances=2)
    best, t = _line_search(walk, start, walk.time(start), "instances", list(range(1, 9)))
    assert (best.instances, t) == (5, 0.0)
    assert walk.calls == [2, 3, 4, 5, 6]  # stops at the first value that is no better; never goes down
    walk = _FakeWalk()
    start = Config("a", instances=8)
    best, _ = _line_search(walk, start, walk.time(start), "instances", list(range(1, 9)))
    assert best.instances == 5 and walk.calls == [8, 7, 6, 5, 4]


def test_unrunnable_configuration_costs_infinity():
    program = lower_to_program(ring_allgather(4))
    evaluator = Evaluator(ring(5), [Candidate("four", "library", program=program)])  # 4-rank program, 5 ranks
    timing = evaluator.time(Config("four"), 1 << 10)
    assert not timing.ok and math.isinf(timing.time_us) and "5 ranks" in timing.failure
    result = tune_size(evaluator, 1 << 10, SMALL)
    assert result.best is None and math.isinf(result.timing.time_us)


def test_interrupted_tuning_keeps_finished_sizes():
    topo = ring(4)
    evaluator = Evaluator(topo, candidates(topo, [ring_allgather(4)]))
    seen = []

    def stop_after_first(result):
        seen.append(result)
        raise KeyboardInterrupt

    run = tune_sizes(evaluator, "allgather", [1 << 10, 1 << 12, 1 << 14], SMALL, on_size=stop_after_first)
    assert run.interrupted and len(run.results) == 1 and run.results[0].size == 1 << 10


def test_bad_input_is_refused():
    with pytest.raises(TuneError, match="empty"):
        parse_size_range("1GB:1KB")
    with pytest.raises(TuneError, match="absurd"):
        parse_size_range("1KB:100TB")
    with pytest.raises(TuneError):
        parse_size_range("lots")
    assert parse_size_range("1KB:1MB") == [1 << 10, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20]
    with pytest.raises(TuneError, match="lacks"):
        algorithm_candidate(direct_allgather(4), ring(4), "allgather")
    with pytest.raises(TuneError, match="not allreduce"):
        algorithm_candidate(ring_allgather(4), ring(4), "allreduce")
    with pytest.raises(TuneError, match="Simple"):
        Grid(protocols=("Fast",))


def test_descending_from_the_best_start_only_spends_fewer_evaluations():
    topo = ring(4)
    cands = candidates(topo, [ring_allgather(4)])
    full = tune_size(Evaluator(topo, cands), 1 << 20, SMALL)
    pruned = tune_size(Evaluator(topo, cands), 1 << 20, SMALL, descents=1)
    assert pruned.evaluations < full.evaluations
    assert pruned.timing.time_us >= full.timing.time_us
    starts = len(cands) * len(SMALL.protocols)
    assert pruned.evaluations >= starts  # every (candidate, protocol) start is still timed


class _CoupledWalk:
    """Merging, fusion and threadblock pairing matter together: from (stage, fused, tb/conn) neither changing
    merge alone nor fusion/pairing alone helps, changing all three does."""

    TIMES = {("stage", True, False): 9.0, ("contiguous", True, False): 10.0, ("stage", False, False): 9.5,
             ("contiguous", False, False): 8.0}

    def time(self, config):
        return self.TIMES.get((config.merge, config.fusion, config.pair_threadblocks), 20.0)

    def time_below(self, config, limit):
        return self.time(config)

    def bound(self, config):
        return -math.inf

    def bound_reaches(self, config, limit):
        return False


def test_descent_changes_merging_fusion_and_pairing_together():
    from collsynth.tune.search import descend

    candidate = algorithm_candidate(ring_allgather(4), ring(4), "allgather")
    grid = Grid(protocols=("Simple",), instances=(1,))
    start = Config(candidate.name, "Simple", 1, "stage", True, False)
    best, t = descend(_CoupledWalk(), grid, candidate, start)
    assert (best.merge, best.fusion, best.pair_threadblocks, t) == ("contiguous", False, False, 8.0)


@pytest.mark.parametrize("size", [1 << 10, 1 << 30])
def test_bound_pruning_changes_no_pick_and_saves_simulations(size, monkeypatch):
    topo = ring(4)
    cands = candidates(topo, [ring_allgather(4)])
    pruned = tune_size(Evaluator(topo, cands), size)
    for config in [c for c, _ in pruned.trace]:  # the bound never exceeds the simulated time
        assert Evaluator(topo, cands).bound(config, size) <= Evaluator(topo, cands).time(config, size).time_us
    monkeypatch.setattr(Evaluator, "bound", lambda self, config, size: -math.inf)
    full = tune_size(Evaluator(topo, cands), size)
    assert (pruned.best, pruned.timing.time_us) == (full.best, full.timing.time_us)
    assert pruned.evaluations <= full.evaluations


# The search's path on a small case, recorded before the evaluator cached plans and shared simulations and
# the simulator's event loop was sped up (f36fe49): caching must change no evaluation, pick or time.
RECORDED_PATHS = {
    1 << 10: ("lib:ring_allgather LL x1 contiguous", 0.4244738051470589, [
        "lib:ring_allgather LL x1 contiguous", "syn:ring-ag LL x1 contiguous", "syn:ring-ag LL x1 contiguous tb/conn",
        "syn:ring-ag LL x1 contiguous nofuse", "syn:ring-ag LL x1 contiguous nofuse tb/conn",
        "syn:ring-ag LL x1 stage", "syn:ring-ag LL x1 stage tb/conn", "syn:ring-ag LL x1 stage nofuse",
        "syn:ring-ag LL x1 stage nofuse tb/conn", "lib:ring_allgather LL x1 contiguous tb/conn",
        "lib:ring_allgather LL x1 contiguous nofuse", "lib:ring_allgather LL x1 contiguous nofuse tb/conn"]),
    1 << 30: ("lib:ring_allgather Simple x2 contiguous", 17798.400000000063, [
        "lib:ring_allgather Simple x1 contiguous", "syn:ring-ag Simple x1 contiguous",
        "syn:ring-ag Simple x2 contiguous",
        "syn:ring-ag Simple x2 contiguous tb/conn", "syn:ring-ag Simple x2 contiguous nofuse",
        "syn:ring-ag Simple x2 contiguous nofuse tb/conn", "syn:ring-ag Simple x2 stage",
        "syn:ring-ag Simple x2 stage tb/conn", "syn:ring-ag Simple x2 stage nofuse",
        "syn:ring-ag Simple x2 stage nofuse tb/conn", "syn:ring-ag Simple x1 contiguous nofuse",
        "lib:ring_allgather Simple x2 contiguous", "lib:ring_allgather Simple x2 contiguous tb/conn",
        "lib:ring_allgather Simple x2 contiguous nofuse", "lib:ring_allgather Simple x2 contiguous nofuse tb/conn"]),
}


@pytest.mark.parametrize("size", sorted(RECORDED_PATHS))
def test_search_path_is_the_recorded_one(size):
    topo = ring(4)
    result = tune_size(Evaluator(topo, candidates(topo, [ring_allgather(4)])), size, SMALL)
    best, time_us, trace = RECORDED_PATHS[size]
    assert result.best is not None and result.best.label() == best
    assert result.timing.time_us == pytest.approx(time_us, rel=1e-12)
    assert [c.label() for c, _ in result.trace] == trace and result.evaluations == len(trace) + result.stopped


@pytest.mark.parametrize("size", [1 << 26, 1 << 30])
def test_stopped_simulations_change_no_decision(size, monkeypatch):
    topo = fully_connected(4)
    cands = candidates(topo, [replace(direct_allgather(4), topology=topo)])
    # every descent runs (the LL ones, which the stops are in here, would otherwise be skipped whole: floor)
    monkeypatch.setattr(Evaluator, "floor", lambda self, config, size: -math.inf)
    stopping = tune_size(Evaluator(topo, cands), size, SMALL)
    assert stopping.stopped >= 1  # the case exercises it: some configuration was ruled out mid-simulation
    monkeypatch.setattr(Evaluator, "time_below", lambda self, config, size, limit: self.time(config, size).time_us)
    full = tune_size(Evaluator(topo, cands), size, SMALL)
    assert full.stopped == 0
    assert (stopping.best, stopping.timing) == (full.best, full.timing)
    rest = iter(full.trace)
    assert all(entry in rest for entry in stopping.trace)  # the same path, less what was stopped
    assert len(full.trace) - len(stopping.trace) <= stopping.stopped
    assert stopping.evaluations == full.evaluations  # a stopped simulation still counts as an evaluation


class _SyntheticEvaluator:
    """Times from a formula (no compile, no simulation): every protocol is fastest at the same resources
    `best_at` (instances, merge, fusion, pairing) unless `protocol_best` says otherwise for a protocol, and
    slower the further (in grid steps) a configuration is from them."""

    def __init__(self, candidate, best_at, protocol_best=None, offset=None):
        self.candidates = {candidate.name: candidate}
        self.best_at, self.protocol_best = best_at, protocol_best or {}
        self.offset = offset or {"Simple": 0.0, "LL": 50.0, "LL128": 5.0}
        self.timed = []

    def _t(self, config):
        k, merge, fusion, pair = self.protocol_best.get(config.protocol, self.best_at)
        distance = (abs(config.instances - k) + (config.merge != merge) + (config.fusion != fusion)
                    + (config.pair_threadblocks != pair))
        return 100.0 + self.offset[config.protocol] + 10.0 * distance

    def seen(self, config, size):
        return config in self.timed

    def time(self, config, size):
        from collsynth.tune.evaluate import Timing

        if config not in self.timed:
            self.timed.append(config)
        return Timing(self._t(config), 1.0, size)

    def time_below(self, config, size, limit):
        return self.time(config, size).time_us

    def bound(self, config, size):
        return -math.inf

    def bound_reaches(self, config, size, limit):
        return False

    def floor(self, config, size):
        return -math.inf


def test_a_candidates_later_descents_start_from_its_best_resources(monkeypatch):
    import collsynth.tune.search as search

    candidate = algorithm_candidate(ring_allgather(4), ring(4), "allgather")
    far = (4, "stage", False, False)  # far from the grid's start (x1 contiguous, fused, paired)
    lent = _SyntheticEvaluator(candidate, far)
    result = tune_size(lent, 1 << 30)
    assert result.best == Config(candidate.name, "Simple", *far)
    # the LL128 descent (the second: LL's start is slower) begins at Simple's best resources, so its first
    # step away from the grid's start is straight there, and from there it only checks the neighbours
    ll128 = [c for c in lent.timed if c.protocol == "LL128"]
    assert ll128[:2] == [Config(candidate.name, "LL128"), Config(candidate.name, "LL128", *far)]
    assert all(c.instances in (3, 4, 5) for c in ll128[1:])
    monkeypatch.setattr(search, "_better_start", lambda walk, start, warm: start)  # each descent from its own start
    alone = _SyntheticEvaluator(candidate, far)
    old = tune_size(alone, 1 << 30)
    assert old.best == result.best and result.evaluations < old.evaluations
    assert len([c for c in alone.timed if c.protocol == "LL128"]) > len(ll128)


def test_a_slower_lent_start_is_not_taken():
    candidate = algorithm_candidate(ring_allgather(4), ring(4), "allgather")
    # LL128 is fastest at the grid's start, where Simple's best resources are 8 grid steps away
    evaluator = _SyntheticEvaluator(candidate, (4, "stage", False, False),
                                    protocol_best={"LL128": (1, "contiguous", True, True)},
                                    offset={"Simple": 0.0, "LL": 500.0, "LL128": -5.0})
    result = tune_size(evaluator, 1 << 30)
    assert result.best == Config(candidate.name, "LL128")
    lent = Config(candidate.name, "LL128", 4, "stage", False, False)
    assert lent in evaluator.timed  # tried as the start, found slower than the grid's start, not walked from
    after = evaluator.timed[evaluator.timed.index(lent) + 1:]
    assert all(c.protocol != "LL128" or c.instances <= 2 for c in after)  # the walk stays near the grid's start


@pytest.mark.parametrize("size", [1 << 20, 1 << 30])
def test_floor_bounds_every_configuration_of_an_algorithm_and_protocol(size):
    topo = ring(4)
    grid = Grid(instances=(1, 2, 3))
    evaluator = Evaluator(topo, candidates(topo, [ring_allgather(4)]))
    for candidate in evaluator.candidates.values():
        for protocol in grid.protocols:
            configs = [c for c in grid.every(candidate) if c.protocol == protocol]
            floors = [evaluator.floor(c, size) for c in configs]
            assert max(floors) <= min(floors) * (1 + 1e-12)  # the resources do not move it
            for config, floor in zip(configs, floors, strict=True):
                assert 0 < floor <= evaluator.time(config, size).time_us


def test_a_descent_that_cannot_win_is_skipped_and_the_pick_stays(monkeypatch):
    topo = ring(4)
    cands = candidates(topo, [ring_allgather(4)])
    skipping = tune_size(Evaluator(topo, cands), 1 << 30)
    monkeypatch.setattr(Evaluator, "floor", lambda self, config, size: -math.inf)
    every = tune_size(Evaluator(topo, cands), 1 << 30)
    assert (skipping.best, skipping.timing) == (every.best, every.timing)
    assert skipping.evaluations < every.evaluations
    # at 1GB no LL128 configuration can beat Simple's best on NVLink: only LL128's starts were timed
    walked = [c for c, _ in every.trace if c.protocol == "LL128" and c.instances > 1]
    assert walked and not [c for c, _ in skipping.trace if c.protocol == "LL128" and c.instances > 1]
