"""`simulate(ir, topology, sizes)`: nccl-tests style timings of an IR under the alpha-beta model.

For each requested size the per-rank buffer (nccl-tests' size column) is cut into `nchunksperloop` chunks
and each chunk into tiles of at most `tile_bytes` (MSCCL's per-iteration chunk for the IR's protocol);
every tile runs the whole program (see `collsynth.sim.engine` for the timing model). Tiles are made equal
(chunk / ceil(chunk / tile_bytes)) rather than full tiles plus a remainder.

Steady state: when a size needs more than 2 x `max_exact_tiles` tiles, that many are simulated first and the
periodic steady state is looked for (`collsynth.sim.steady`: every step's finish time growing by the same D
every q tiles, among the tiles the run's end does not affect); the remaining tiles are then added in whole
periods, T(N) = T(P) + (N - P) / q * D with P = N (mod q), which is what simulating all N tiles gives. Where
no period shows yet, twice as many tiles are simulated, up to all of them (then nothing is extrapolated).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

from collsynth.collectives.spec import canonical_name, display_name
from collsynth.core.collector import paused_collector
from collsynth.core.costs import (  # noqa: F401  (TILE_BYTES_BY_PROTOCOL, LOCAL_ALPHA_US re-exported)
    COPY_BETA_US_PER_MIB,
    LOCAL_ALPHA_US,
    MIB,
    REDUCE_BETA_US_PER_MIB,
    TILE_BYTES_BY_PROTOCOL,
    local_step_us,
)
from collsynth.ir import SENDING_TYPES, Algo
from collsynth.sim import engine, protocol, steady
from collsynth.sim.nccl import SimError, busbw_factor, dtype_info, nccl_size
from collsynth.topologies.model import Topology

# The one cost table (collsynth.core.costs, documented in docs/formats.md "One cost model"): MB is a MiB, the
# unit of beta_us_per_mb everywhere; tiles per protocol; standalone cpy at LOCAL_BETA_US_PER_MB, re at
# REDUCE_BETA_US_PER_MB (3/2 of a copy: three bytes of memory traffic per payload byte instead of two).
MB = MIB
LOCAL_BETA_US_PER_MB = COPY_BETA_US_PER_MIB
REDUCE_BETA_US_PER_MB = REDUCE_BETA_US_PER_MIB


@dataclass(frozen=True)
class SimModel:
    """Knobs of the timing model; the defaults are documented in this module and in `engine`."""

    local_alpha_us: float = LOCAL_ALPHA_US
    local_beta_us_per_mb: float = LOCAL_BETA_US_PER_MB  # cpy
    reduce_beta_us_per_mb: float = REDUCE_BETA_US_PER_MB  # re
    tile_bytes: int | None = None  # None: by the IR's protocol (TILE_BYTES_BY_PROTOCOL)
    max_exact_tiles: int = 16  # tiles simulated before looking for the periodic steady state
    fifo_slots: int | None = engine.FIFO_SLOTS  # per-connection sends in flight; None: unbounded (eager)

    def __post_init__(self) -> None:
        if self.tile_bytes is not None and self.tile_bytes < 1:
            raise SimError(f"tile_bytes must be >= 1, got {self.tile_bytes}")
        if self.max_exact_tiles < 2:
            raise SimError(f"max_exact_tiles must be >= 2, got {self.max_exact_tiles}")
        if self.fifo_slots is not None and self.fifo_slots < 1:
            raise SimError(f"fifo_slots must be >= 1 (or None for unbounded), got {self.fifo_slots}")
        if self.local_alpha_us < 0 or self.local_beta_us_per_mb < 0 or self.reduce_beta_us_per_mb < 0:
            raise SimError("local step costs must be >= 0")

    def local_step_us(self, step_type: str, cnt: int, chunk_bytes: float, ntiles: int) -> float:
        """What this model charges a standalone local step (cpy, re) over the whole tile loop; 0 otherwise (the
        engine charges `local_alpha_us + cnt * slice MiB * beta` per tile: the same sum)."""
        return local_step_us(step_type, cnt, chunk_bytes, ntiles, alpha_us=self.local_alpha_us,
                             copy_beta=self.local_beta_us_per_mb, reduce_beta=self.reduce_beta_us_per_mb)

    def tile_for(self, proto: str) -> int:
        if self.tile_bytes is not None:
            return self.tile_bytes
        return TILE_BYTES_BY_PROTOCOL.get(proto, TILE_BYTES_BY_PROTOCOL["Simple"])


class SimRow(NamedTuple):
    """One line of the nccl-tests table."""

    size_bytes: int
    # nccl-tests' column name; shadowing tuple.count is deliberate (to_dict uses _asdict, so it stays a
    # NamedTuple) and mypy flags any NamedTuple field that shadows a tuple method.
    count: int  # type: ignore[assignment]
    type: str
    time_us: float
    algbw_GBps: float
    busbw_GBps: float


@dataclass(frozen=True)
class SimResult:
    algorithm: str
    collective: str
    ngpus: int
    topology: str
    dtype: str
    rows: tuple[SimRow, ...]
    tiles: tuple[int, ...]  # per row: tiles the MSCCL loop runs
    extrapolated: tuple[bool, ...]  # per row: whether the steady-state extrapolation was used
    model: SimModel = field(default_factory=SimModel)

    @property
    def avg_busbw_GBps(self) -> float:
        return sum(row.busbw_GBps for row in self.rows) / len(self.rows) if self.rows else 0.0

    def table(self) -> str:
        """The rows in nccl-tests' layout (comment header, right-aligned columns, average busbw)."""
        lines = [
            f"# collsynth sim: {self.algorithm} ({display_name(self.collective)}, {self.ngpus} ranks) "
            f"on {self.topology}",
            f"# {'size':>10}  {'count':>12}  {'type':>8}  {'time':>10}  {'algbw':>7}  {'busbw':>7}",
            f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'(us)':>10}  {'(GB/s)':>7}  {'(GB/s)':>7}",
        ]
        for row, extrapolated in zip(self.rows, self.extrapolated, strict=True):
            mark = "  ~" if extrapolated else ""
            lines.append(f"{row.size_bytes:>12}  {row.count:>12}  {row.type:>8}  {row.time_us:>10.2f}  "
                         f"{row.algbw_GBps:>7.2f}  {row.busbw_GBps:>7.2f}{mark}")
        lines.append(f"# Avg bus bandwidth    : {self.avg_busbw_GBps:.4g}")
        if any(self.extrapolated):
            lines.append("# ~ : tiles past the periodic steady state added in whole periods")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "algorithm": self.algorithm, "collective": self.collective, "ngpus": self.ngpus,
            "topology": self.topology, "dtype": self.dtype,
            "rows": [dict(row._asdict(), tiles=tiles, extrapolated=extrapolated)
                     for row, tiles, extrapolated in zip(self.rows, self.tiles, self.extrapolated, strict=True)],
            "avg_busbw_GBps": self.avg_busbw_GBps,
            "model": asdict(self.model),
        }

    def __str__(self) -> str:
        return self.table()


def simulate(ir: Algo, topology: Topology, sizes: Iterable[int], *, dtype: str = "float32",
             model: SimModel | None = None, planned: engine.Plan | None = None,
             stop_at: float = math.inf) -> SimResult:
    """Time `ir` on `topology` for each requested size (bytes, nccl-tests `-b/-e` style). `planned`: the
    plan `engine.plan(ir, topology)` made earlier (planning is size-independent; a tuner times one IR at
    many sizes); None: planned here. `stop_at`: raise `engine.NotFaster` once a size's time is proved to be
    at least that many us (a search that only needs to know whether it beats a time; see `engine.run`).

    The cyclic collector is paused for the whole call, not only in the event loop: the plan is millions of
    acyclic records at 1024 ranks, and where it is made here it is also freed before the pause ends, so the
    collection that follows the pause does not scan it (or the caller's heap, a compiled IR) once more."""
    with paused_collector():
        return _simulate(ir, topology, sizes, dtype=dtype, model=model, planned=planned, stop_at=stop_at)


def _simulate(ir: Algo, topology: Topology, sizes: Iterable[int], *, dtype: str, model: SimModel | None,
              planned: engine.Plan | None, stop_at: float) -> SimResult:
    model = model or SimModel()
    type_name, elem_bytes = dtype_info(dtype)
    if ir.nchunksperloop < 1:
        raise SimError(f"IR {ir.name!r}: nchunksperloop is {ir.nchunksperloop}; it must be >= 1")
    sizes = [int(size) for size in sizes]
    if not sizes:
        raise SimError("no sizes to simulate; give at least one size")
    if planned is None:
        planned = engine.plan(ir, topology)
    factor = busbw_factor(ir.collective, ir.ngpus)
    tile_bytes = model.tile_for(ir.proto)
    rows, tiles, extrapolated = [], [], []
    for requested in sizes:
        nccl = nccl_size(ir.collective, ir.ngpus, requested, elem_bytes)
        chunk_bytes = nccl.size_bytes / ir.nchunksperloop
        ntiles = max(1, math.ceil(chunk_bytes / tile_bytes))
        time_us, approx = time_tiles(planned, chunk_bytes / ntiles / MB, ntiles, model, stop_at)
        algbw = nccl.size_bytes / 1e9 / (time_us * 1e-6) if time_us > 0 else 0.0
        rows.append(SimRow(nccl.size_bytes, nccl.count, type_name, time_us, algbw, algbw * factor))
        tiles.append(ntiles)
        extrapolated.append(approx)
    return SimResult(algorithm=ir.name, collective=canonical_name(ir.collective), ngpus=ir.ngpus,
                     topology=topology.name, dtype=type_name, rows=tuple(rows), tiles=tuple(tiles),
                     extrapolated=tuple(extrapolated), model=model)


def busy_bound_us(ir: Algo, topology: Topology, size: int, *, dtype: str = "float32",
                  model: SimModel | None = None) -> float:
    """A lower bound on `simulate`'s time at `size` without running it: every transfer holds its link (and a
    lane of each switch it crosses) for its whole duration, so the busiest link's total, and each switch's
    total over its lanes, are no more than the makespan. Cheap (no planning, no event loop): for pruning
    searches. Assumes an IR that `simulate` accepts (links exist)."""
    return profile_bound_us(link_profile(ir), ir.nchunksperloop, ir.collective, ir.ngpus, ir.proto, topology, size,
                            dtype=dtype, model=model)


# Per link (src, dst) that the IR sends on: its sending steps and their chunk counts (sum of cnt) per tile.
LinkProfile = dict[tuple[int, int], tuple[int, int]]


def link_profile(ir: Algo) -> LinkProfile:
    """What `busy_bound_us` reads of an IR besides its header: per link, the sending steps and chunks a tile."""
    counts: LinkProfile = {}
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            sends = [step.cnt for step in tb.steps if step.type in SENDING_TYPES]
            if sends:
                steps, cnt = counts.get((gpu.id, tb.send), (0, 0))
                counts[(gpu.id, tb.send)] = (steps + len(sends), cnt + sum(sends))
    return counts


def profile_bound_us(counts: LinkProfile, nchunksperloop: int, collective: str, ngpus: int, proto: str,
                     topology: Topology, size: int, *, dtype: str = "float32", model: SimModel | None = None) -> float:
    """`busy_bound_us` of an IR with this link profile and header (the tuner derives profiles it has not
    compiled; collsynth.tune.evaluate). Switch totals are summed in link order, whatever order `counts` has."""
    model = model or SimModel()
    _, elem_bytes = dtype_info(dtype)
    nccl = nccl_size(collective, ngpus, int(size), elem_bytes)
    chunk_bytes = nccl.size_bytes / nchunksperloop
    ntiles = max(1, math.ceil(chunk_bytes / model.tile_for(proto)))
    slice_mb = chunk_bytes / ntiles / MB
    links = {(link.src, link.dst): link for link in topology.link_list}
    busy: dict[tuple[int, int], float] = {}
    switch_busy = [0.0] * len(topology.switches)
    for pair in sorted(counts):
        steps, cnt = counts[pair]
        link = links.get(pair)
        if link is None:
            return 0.0  # simulate will name the missing link; no bound
        crossed = [i for i, switch in enumerate(topology.switches) if pair in switch.links]
        alpha = link.alpha_us
        beta = max([link.beta_us_per_mb] + [topology.switches[i].beta_us_per_mb for i in crossed])
        if proto != "Simple":
            alpha *= protocol.latency_scale(proto, link.kind)
            beta *= protocol.beta_scale(proto)
        busy[pair] = ntiles * (steps * alpha + cnt * slice_mb * beta)
        for i in crossed:
            switch_busy[i] += busy[pair]
    return max(list(busy.values()) + [total / max(1, switch.bandwidth)
                                      for total, switch in zip(switch_busy, topology.switches, strict=True)],
               default=0.0)


def time_tiles(planned: engine.Plan, slice_mb: float, ntiles: int, model: SimModel,
               stop_at: float = math.inf) -> tuple[float, bool]:
    """Makespan of `ntiles` tiles of `slice_mb` MB chunk slices; True when the steady state was extrapolated.
    `stop_at`: engine.NotFaster once the makespan is proved to be at least that (only a run of every tile
    is stopped: a shorter probe's makespan says nothing certain about the whole loop's)."""
    # up to twice the first probe, simulating every tile costs no more than a probe that finds no period
    probe = ntiles if ntiles <= 2 * model.max_exact_tiles else model.max_exact_tiles
    # each longer run goes on from the shorter one's state (collsynth.sim.snapshot): the same run, fewer events
    result: engine.RunResult | None = None
    while True:
        full = probe == ntiles
        result = _run(planned, slice_mb, probe, model, stop_at, keep_for=0 if full else ntiles,
                      resume=result.snapshot if result is not None else None)
        if full:
            return result.time_us, False
        state = steady.find_steady_state(planned, result, probe, model.fifo_slots)
        if state is not None:
            extra = (ntiles - probe) % state.tiles
            if extra:  # end on the same phase of every period as the full run
                probe += extra
                result = _run(planned, slice_mb, probe, model, math.inf, resume=result.snapshot)
            return state.extrapolate(result, probe, ntiles), True
        probe = 2 * probe if ntiles - 2 * probe >= probe else ntiles  # no probe almost as long as the run


def _run(planned: engine.Plan, slice_mb: float, ntiles: int, model: SimModel, stop_at: float, *,
         keep_for: int = 0, resume: engine.Snapshot | None = None) -> engine.RunResult:
    return engine.run(planned, slice_mb, ntiles, local_alpha_us=model.local_alpha_us,
                      local_beta_us_per_mb=model.local_beta_us_per_mb,
                      reduce_beta_us_per_mb=model.reduce_beta_us_per_mb, fifo_slots=model.fifo_slots,
                      stop_at=stop_at, keep_for=keep_for, resume=resume)
