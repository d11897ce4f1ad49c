"""`greedy(topology, collective, size)`: the time-expanded greedy synthesizer (issue 10, item 1).

- Non-combining collectives (AllGather, Broadcast, Gather, Scatter, AllToAll) run the link-chunk matching
  of `timexp` directly; one-destination collectives (AllToAll, Gather, Scatter) also run the
  per-destination engine of `unicast` and keep the shorter schedule (past timexp's (ranks x chunks) limit,
  e.g. AllToAll at 512+ ranks, only `unicast` runs).
- ReduceScatter and Reduce are the reversed duals of AllGather and Broadcast: the dual's schedule on the
  reversed topology, run backwards in time (a copy c u->v over [s, s+d] becomes a reduce c v->u over
  [T-s-d, T-s]); in the dual every rank receives a chunk once, so in the reverse every rank sends its
  partial sum once, after everything it sums has arrived.
- AllReduce is ReduceScatter then AllGather, the second shifted by the first's makespan.

The result is a timed `Algorithm` (every send carries start_us / duration_us; one step per distinct start
time, one round each) that passes `verify()`; its makespan is the synthesizer's model time.
"""

from __future__ import annotations

import time
from itertools import repeat
from typing import Any

import numpy as np

from collsynth.collectives import Collective, make_collective
from collsynth.core.collector import paused_collector
from collsynth.core.enums import Op, Status
from collsynth.schedule import COPY, REDUCE, Algorithm, Step, SynthesisResult, verify
from collsynth.schedule.algorithm import send_of_fields
from collsynth.schedule.transforms import TimedSends, reversed_sends
from collsynth.synth.cluster.timexp import MAX_CELLS, MIB, GreedyError, Transfers, link_arrays, run_greedy
from collsynth.synth.cluster.unicast import one_destination_ends, run_unicast
from collsynth.topologies import Topology
from collsynth.topologies.symmetry import reversed_topology

SUPPORTED = ("allgather", "broadcast", "gather", "scatter", "alltoall", "reducescatter", "reduce", "allreduce")


def chunk_megabytes(collective: Collective, size_bytes: int) -> float:
    """MiB of one chunk when the larger per-rank buffer (nccl-tests' size) is `size_bytes`."""
    return size_bytes / max(collective.input_chunks, collective.output_chunks) / MIB


def _objects(values: np.ndarray) -> list[Any]:
    """The values as Python objects, one object per distinct value."""
    distinct, inverse = np.unique(values, return_inverse=True)
    pool = np.empty(len(distinct), dtype=object)
    pool[:] = distinct.tolist()
    return pool[inverse.ravel()].tolist()  # type: ignore[no-any-return]


def _steps(transfers: Transfers, op: Op, offset_us: float = 0.0) -> tuple[Step, ...]:
    """One step per distinct start time (transfers sorted by start), one round each.

    A 1024-rank AllToAll has ~17M sends: they are made step by step, sharing one int object per chunk or rank
    and one float per distinct time of a step (not one object per send field: ~1 GB more), with the cyclic
    collector paused (Sends cannot form cycles; scanning millions of them over and over doubles the time)."""
    order = np.lexsort((transfers.src, transfers.chunk, transfers.start_us))
    starts = np.round(transfers.start_us[order], 6)
    cuts = np.flatnonzero(np.r_[True, starts[1:] != starts[:-1], True]).tolist()
    del starts
    chunk, src, dst = transfers.chunk, transfers.src, transfers.dst
    ints = np.empty(int(max(chunk.max(), src.max(), dst.max())) + 1 if len(chunk) else 0, dtype=object)
    ints[:] = range(len(ints))
    steps = []
    with paused_collector():
        for a, b in zip(cuts[:-1], cuts[1:], strict=True):
            rows = order[a:b]
            sends = map(send_of_fields, ints[chunk[rows]].tolist(), ints[src[rows]].tolist(),
                        ints[dst[rows]].tolist(), repeat(op), _objects(transfers.start_us[rows] + offset_us),
                        _objects(transfers.duration_us[rows]))
            steps.append(Step(1, tuple(sends)))
    return tuple(steps)


def _reverse(transfers: Transfers) -> Transfers:
    """The reductions of `transfers` (schedule.reversed_sends)."""
    r = reversed_sends(TimedSends(transfers.chunk, transfers.src, transfers.dst, transfers.start_us,
                                  transfers.duration_us, transfers.makespan_us))
    return Transfers(r.chunk, r.src, r.dst, r.start, r.duration)


def greedy_steps(topology: Topology, collective: Collective, chunk_mb: float, seed: int,
                 offset_us: float = 0.0) -> tuple[tuple[Step, ...], float]:
    """The steps of `collective` (any of SUPPORTED) and their makespan in microseconds."""
    name = collective.name
    if name == "allreduce":
        n, c = collective.num_ranks, collective.chunks
        first, mid = greedy_steps(topology, make_collective("reducescatter", n, c), chunk_mb, seed, offset_us)
        second, end = greedy_steps(topology, make_collective("allgather", n, c), chunk_mb, seed, mid)
        return first + second, end
    if name in ("reducescatter", "reduce"):
        dual = collective.non_combining_dual()
        transfers = _reverse(run_greedy(reversed_topology(topology), dual, chunk_mb, seed=seed))
        return _steps(transfers, REDUCE, offset_us), offset_us + transfers.makespan_us
    if collective.combining:
        raise GreedyError(f"greedy: combining collective {name!r} is not supported; supported: {', '.join(SUPPORTED)}")
    transfers = _copies(topology, collective, chunk_mb, seed)
    return _steps(transfers, COPY, offset_us), offset_us + transfers.makespan_us


def _copies(topology: Topology, collective: Collective, chunk_mb: float, seed: int) -> Transfers:
    """The matching of `timexp`; for one-destination collectives also the per-destination engine of `unicast`
    (the only one past timexp's cell limit), keeping the shorter makespan (timexp's on ties)."""
    dense_fits = collective.num_ranks * collective.num_chunks <= MAX_CELLS
    if one_destination_ends(collective) is None:
        return run_greedy(topology, collective, chunk_mb, seed=seed)
    sparse = run_unicast(topology, collective, link_arrays(topology, chunk_mb), seed=seed)
    if not dense_fits:
        return sparse
    dense = run_greedy(topology, collective, chunk_mb, seed=seed)
    return dense if dense.makespan_us <= sparse.makespan_us + 1e-9 else sparse


def greedy(topology: Topology, collective: Collective, size_bytes: int = 1 << 30, *, seed: int = 0) -> SynthesisResult:
    """A verified, timed Algorithm of `collective` on `topology` for buffers of `size_bytes`."""
    if collective.num_ranks != topology.num_ranks:
        raise GreedyError(f"greedy: collective has {collective.num_ranks} ranks, topology {topology.name} has "
                          f"{topology.num_ranks}; make them match")
    if size_bytes < 1:
        raise GreedyError(f"greedy: size must be >= 1 byte, got {size_bytes}")
    began = time.perf_counter()
    steps, makespan = greedy_steps(topology, collective, chunk_megabytes(collective, size_bytes), seed)
    seconds = time.perf_counter() - began
    provenance = {"synthesizer": "greedy", "size_bytes": size_bytes, "seed": seed, "makespan_us": makespan,
                  "seconds": round(seconds, 3)}
    algorithm = Algorithm(f"greedy-{collective.name}-{topology.name}", topology, collective, steps, provenance)
    verify(algorithm)
    return SynthesisResult(Status.SAT, (algorithm,), None, "time_us", "greedy", time.perf_counter() - began,
                           provenance)
