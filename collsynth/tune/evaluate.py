"""Evaluating a configuration: lower, compile (cached: compilation is size- and protocol-independent),
then time it with the simulator, or with a GPU backend when one is present (the hook: `backend="cuda"`).

What is cached, and why each key is complete (nothing else in an evaluator changes: its topology, dtype,
model and target are fixed, and `subset` shares the caches only with an evaluator that has the same):
the lowered program per (algorithm, merge), the arguments `lower_to_program` takes but the instance count (the
ops do not depend on it; compile_program sets it, so the compiler's forms are shared across counts); the compiled
IR per the configuration less its protocol (the compiler does not read it; the protocol is set afterwards),
and the compiler's forms that configurations share (compile_program's `reuse`, keyed by what they depend on);
the simulator's plan per the configuration (built IR and protocol: what `engine.plan` reads), reused across
sizes; and a simulated time per (plan, the IR's protocol (its tile size), collective, ranks and chunks per
loop, size), so that two
configurations that compile to the same plan (e.g. fusion with nothing to fuse) share one simulation: the
simulator's result is a function of exactly these.

An evaluation that cannot run (the compiler refuses, the simulated IR deadlocks) costs infinity: the
search moves past it. The number of distinct (configuration, size) evaluations is the search's cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from collsynth.compiler import FormCache, compile_program
from collsynth.core.errors import CollsynthError
from collsynth.ir import Algo
from collsynth.language.lower import lower_to_program
from collsynth.language.program import Program
from collsynth.sim import SimModel, SimRow, simulate
from collsynth.sim.engine import NotFaster, Plan, plan
from collsynth.sim.simulate import LinkProfile, link_profile, profile_bound_us
from collsynth.topologies import Topology
from collsynth.tune.space import Candidate, Config, TuneError

BACKENDS = ("sim", "cuda")
_Build = tuple[str, int, str, bool, bool, bool, bool]  # algorithm, instances, merge, fusion, pairing, timed order/merge
_Variant = tuple[str, str, bool, bool, bool, bool]  # _Build less the instance count
_Lowered = tuple[str, str]  # algorithm, merge
_Simulated = tuple[Plan, str, str, int, int, int]  # plan, protocol (tiles), collective, ranks, chunks per loop, size


@dataclass(frozen=True)
class Timing:
    """One evaluation: the time (inf when the configuration cannot run), busbw, and why it failed."""

    time_us: float
    busbw_GBps: float = 0.0
    size_bytes: int = 0  # the nccl-tests size actually timed
    failure: str = ""

    @property
    def ok(self) -> bool:
        return math.isfinite(self.time_us)


class Evaluator:
    """Times configurations of some candidates on one topology; caches compiled IRs and timings."""

    def __init__(self, topology: Topology, candidates: list[Candidate] | tuple[Candidate, ...], *,
                 backend: str = "sim", dtype: str = "float32", model: SimModel | None = None,
                 target: str | None = None) -> None:
        if backend not in BACKENDS:
            raise TuneError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if backend == "cuda":
            try:
                import cupy  # type: ignore[import-not-found]  # noqa: F401
            except ImportError:
                raise TuneError("backend 'cuda' needs cupy and a GPU (pip install collsynth[gpu]); "
                                "use --backend sim") from None
        names = [c.name for c in candidates]
        if len(set(names)) != len(names):
            raise TuneError(f"two candidates share a name: {sorted(n for n in names if names.count(n) > 1)[0]!r}")
        self.topology, self.backend, self.dtype = topology, backend, dtype
        self.target = target  # a runtime (collsynth.core.targets): every configuration compiled (split) for it
        self.model = model or SimModel()
        self.candidates = {c.name: c for c in candidates}
        self._programs: dict[_Lowered, Program] = {}
        self._irs: dict[_Build, Algo | str] = {}
        self._forms: FormCache = {}  # the compiler's forms that configurations of one program share
        self._plans: dict[Config, Plan | str] = {}
        self._rows: dict[_Simulated, SimRow | str] = {}
        self._rows_at_least: dict[_Simulated, float] = {}  # proved by a simulation stopped early (time_below)
        self._timings: dict[tuple[Config, int], Timing] = {}
        self._at_least: dict[tuple[Config, int], float] = {}  # the same, per configuration and size
        self._links: dict[_Build, LinkProfile] = {}  # per compiled build: what the link bounds read of it
        self._profiled: dict[_Variant, int] = {}  # per variant: its first compiled instance count >= 2 (_derived_bound)

    def subset(self, names: list[str] | tuple[str, ...]) -> Evaluator:
        """An evaluator of some of the candidates that shares this one's compiled IRs and timings."""
        sub = Evaluator(self.topology, [self.candidates[n] for n in names], backend=self.backend, dtype=self.dtype,
                        model=self.model, target=self.target)
        sub._programs, sub._irs, sub._plans, sub._rows = self._programs, self._irs, self._plans, self._rows
        sub._forms = self._forms
        sub._rows_at_least, sub._timings, sub._at_least = self._rows_at_least, self._timings, self._at_least
        sub._links, sub._profiled = self._links, self._profiled
        return sub

    @property
    def evaluations(self) -> int:
        """Distinct (configuration, size) pairs timed so far."""
        return len(self._timings)

    def ir(self, config: Config) -> Algo:
        """The compiled IR of `config` (raises the compiler's error when it cannot be built)."""
        built = self._build(config)
        if isinstance(built, str):
            raise TuneError(f"{config.label()}: {built}")
        return replace(built, proto=config.protocol)

    def _build(self, config: Config) -> Algo | str:
        key = _build_key(config)
        if key not in self._irs:
            candidate = self.candidates[config.algorithm]
            try:
                if candidate.algorithm is not None:
                    lowered = (config.algorithm, config.merge)
                    if lowered not in self._programs:  # instances: set by compile_program below
                        self._programs[lowered] = lower_to_program(candidate.algorithm, merge=config.merge)
                    program = self._programs[lowered]
                else:
                    assert candidate.program is not None
                    program = candidate.program
                options: dict[str, Any] = {"aggregate_either_end": True} if config.timed_merge else {}
                self._irs[key] = compile_program(program, self.target, reuse=self._forms, instances=config.instances,
                                                 instr_fusion=config.fusion,
                                                 pair_threadblocks=config.pair_threadblocks,
                                                 timed_order=config.timed_order, **options)
            except CollsynthError as exc:
                self._irs[key] = str(exc)
            if config.instances >= 2 and not isinstance(self._irs[key], str):
                self._profiled.setdefault(_variant(key), config.instances)
        return self._irs[key]

    def time(self, config: Config, size: int) -> Timing:
        """Time `config` at `size` bytes (nccl-tests size), once; later calls come from the cache."""
        key = (config, size)
        if key not in self._timings:
            timing = self._measure(config, size)
            assert timing is not None  # nothing stops a simulation without a stop_at
            self._timings[key] = timing
        return self._timings[key]

    def time_below(self, config: Config, size: int, limit: float) -> float:
        """`time(config, size).time_us` where that is below `limit`; otherwise some value >= limit, and then
        the simulation may have stopped as soon as it proved that (`engine.run`'s stop_at): nothing is timed
        then (`seen` stays False; `bound` returns the value from now on). For a search that only needs to know
        whether a configuration beats `limit`: the answer is always the one `time` gives."""
        key = (config, size)
        if key not in self._timings:
            if self._at_least.get(key, -math.inf) >= limit:
                return self._at_least[key]
            timing = self._measure(config, size, limit)
            if timing is None:
                self._at_least[key] = limit
                return limit
            self._timings[key] = timing
        return self._timings[key].time_us

    def bound(self, config: Config, size: int) -> float:
        """A lower bound on `time(config, size)` that runs no simulation (the busiest link's or switch's total
        transfer time, collsynth.sim.simulate.busy_bound_us, or what a stopped simulation proved); inf when the
        configuration cannot be built, 0 on a GPU backend (no bound)."""
        if (config, size) in self._timings:
            return self._timings[(config, size)].time_us
        built = self._build(config)
        if isinstance(built, str):
            return math.inf
        if self.backend != "sim":
            return 0.0
        busy = self._link_bound(self._link_profile(config), built.nchunksperloop, built, config.protocol, size)
        if busy is None:
            return math.inf
        return max(busy, self._at_least.get((config, size), -math.inf))

    def floor(self, config: Config, size: int) -> float:
        """A lower bound on `time` at `size` of every configuration that differs from `config` only in its
        resources (instances, merging, fusion, threadblocks, order): the busiest link's, or switch's, transfer
        time less its alphas. Each link carries the same share of the buffer in all of them, the schedule's
        (sending steps merge or split, but the chunks per loop they move scale with the chunks per loop:
        tests/tune/test_tune_search.py checks it over whole grids). -inf where `config` cannot be built, or on
        a GPU backend (no bound)."""
        built = self._build(config)
        if isinstance(built, str) or self.backend != "sim":
            return -math.inf
        volume = {pair: (0, cnt) for pair, (_, cnt) in self._link_profile(config).items()}
        floor = self._link_bound(volume, built.nchunksperloop, built, config.protocol, size)
        return -math.inf if floor is None else floor

    def bound_reaches(self, config: Config, size: int, limit: float) -> bool:
        """Whether `bound(config, size) >= limit`, answered without compiling `config` where a bound derived
        from another instance count of it already reaches `limit` (_derived_bound): that bound is the compiled
        one exactly, or below it where the compile fails (its bound is then infinite), so the answer is the
        same; otherwise `bound` answers."""
        if self.backend == "sim" and (config, size) not in self._timings and _build_key(config) not in self._irs:
            derived = self._derived_bound(config, size)
            if derived is not None and derived >= limit:
                return True
        return self.bound(config, size) >= limit

    def _derived_bound(self, config: Config, size: int) -> float | None:
        """`bound` of `config` from a compiled count k0 >= 2 of its variant (None: none, or `config` has one
        instance). For two or more instances, compile_program replicates one placed form, the same for every
        count (the passes before replicate_instances read only whether there is more than one: pipeline.py),
        and the copies add no sends (only waits), so each link's sending steps and chunks a tile, and the chunks
        per loop, are k / k0 times k0's; tests/tune/test_evaluate_cache.py checks it against compiled IRs."""
        k0 = self._profiled.get(_variant(_build_key(config)))
        if config.instances < 2 or k0 is None:
            return None
        compiled = replace(config, instances=k0)
        built, counts, k = self._build(compiled), self._link_profile(compiled), config.instances
        assert not isinstance(built, str)  # only compiled counts are recorded
        if built.nchunksperloop * k % k0 or any(steps * k % k0 or cnt * k % k0 for steps, cnt in counts.values()):
            return None
        scaled = {pair: (steps * k // k0, cnt * k // k0) for pair, (steps, cnt) in counts.items()}
        return self._link_bound(scaled, built.nchunksperloop * k // k0, built, config.protocol, size)

    def _link_profile(self, config: Config) -> LinkProfile:
        """link_profile of config's compiled IR (which must exist), made once per build."""
        key = _build_key(config)
        if key not in self._links:
            built = self._irs[key]
            assert not isinstance(built, str)
            self._links[key] = link_profile(built)
        return self._links[key]

    def _link_bound(self, counts: LinkProfile, nchunks: int, built: Algo, protocol: str, size: int) -> float | None:
        """profile_bound_us of this link profile and chunks per loop, with `built`'s collective and ranks, less
        a relative 1e-9 (the bound can be tight, and its sum rounds differently from the simulation's); None
        where the simulator refuses it."""
        try:
            return profile_bound_us(counts, nchunks, built.collective, built.ngpus, protocol,
                                    self.topology, size, dtype=self.dtype, model=self.model) * (1 - 1e-9)
        except CollsynthError:
            return None

    def seen(self, config: Config, size: int) -> bool:
        return (config, size) in self._timings

    def _measure(self, config: Config, size: int, stop_at: float = math.inf) -> Timing | None:
        """The timing; None when the simulation stopped once it proved the time is at least `stop_at`."""
        built = self._build(config)
        if isinstance(built, str):
            return Timing(math.inf, failure=built)
        ir = replace(built, proto=config.protocol)
        if self.backend == "cuda":  # pragma: no cover - needs a GPU
            from collsynth.runtime import execute

            result = execute(ir, "cuda", nbytes=size, dtype=self.dtype)
            if not result.passed:
                return Timing(math.inf, failure=result.message)
            return Timing(result.seconds * 1e6, 0.0, size)
        planned = self._plan(config, ir)
        if isinstance(planned, str):
            return Timing(math.inf, failure=planned)
        key = (planned, ir.proto, ir.collective, ir.ngpus, ir.nchunksperloop, size)
        if key not in self._rows:
            if self._rows_at_least.get(key, -math.inf) >= stop_at:
                return None
            try:
                self._rows[key] = simulate(ir, self.topology, [size], dtype=self.dtype, model=self.model,
                                           planned=planned, stop_at=stop_at).rows[0]
            except NotFaster:
                self._rows_at_least[key] = stop_at
                return None
            except CollsynthError as exc:
                self._rows[key] = str(exc)
        row = self._rows[key]
        if isinstance(row, str):
            return Timing(math.inf, failure=row)
        return Timing(row.time_us, row.busbw_GBps, row.size_bytes)

    def _plan(self, config: Config, ir: Algo) -> Plan | str:
        """The simulator's plan of `config`'s IR (size-independent: made once for every size)."""
        if config not in self._plans:
            try:
                self._plans[config] = plan(ir, self.topology)
            except CollsynthError as exc:
                self._plans[config] = str(exc)
        return self._plans[config]


def _build_key(config: Config) -> _Build:
    """What compile_program reads of a configuration (not its protocol: that is set on the IR afterwards)."""
    return (config.algorithm, config.instances, config.merge, config.fusion, config.pair_threadblocks,
            config.timed_order, config.timed_merge)


def _variant(key: _Build) -> _Variant:
    """A build key less its instance count."""
    return (key[0], *key[2:])
