"""The simulator's alpha-beta model against the CUDA interpreter measured on one GPU:
`.venv/bin/python bench/device_model.py [RESULTS.txt]` (default: docs/data/cuda_h200_2026-11-27.txt).

All 8 ranks live on one GPU, so a "device" topology stands for it: every pair of ranks linked (alpha per
message, beta per MB), and two ways to charge bandwidth:
- independent links (what the simulator assumes of NVLink): each link moves data at its own beta;
- one shared memory (one switch holding every link, one lane): all transfers share the device's bandwidth.
For each, a fixed per-launch overhead (the simulator has no such term: an empty kernel alone costs ~5.6 us)
and alpha are fitted to the small sizes, then beta to the large ones (least squares on relative error), the
simulator giving each row's message count and MB on the critical path. The table shows measured and
fitted times per row and the fit's error; it judges which model describes one GPU, and what alpha and beta
are there. The measured rows are the newest per (collective, algorithm, size) in the results file.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from collsynth.core.units import format_size, parse_size
from collsynth.runtime.cuda.workloads import allpairs_allreduce, alltoall, ring_allgather, ring_allreduce
from collsynth.sim import simulate
from collsynth.topologies.model import Link, Switch, Topology

DEFAULT_RESULTS = Path(__file__).parents[1] / "docs" / "data" / "cuda_h200_2026-11-27.txt"
BUILDERS = {("AllGather", "ring"): ring_allgather, ("AllReduce", "ring"): ring_allreduce,
            ("AllReduce", "all-pairs"): allpairs_allreduce, ("AllToAll", "all-pairs"): alltoall}
ROW = re.compile(r"^(AllGather|AllReduce|AllToAll)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s")


@dataclass(frozen=True)
class Measured:
    collective: str
    algorithm: str
    size: int
    instances: int
    us: float


def read_rows(path: Path) -> list[Measured]:
    """The newest row per (collective, algorithm, size): later sections of the file supersede earlier ones."""
    rows: dict[tuple[str, str, int], Measured] = {}
    for line in path.read_text().splitlines():
        if (match := ROW.match(line)) is None:
            continue
        coll, algo, size, inst, _, us = match.groups()
        row = Measured(coll, algo, parse_size(size), int(inst), float(us))
        rows[(coll, algo, row.size)] = row
    return sorted(rows.values(), key=lambda r: (r.collective, r.algorithm, r.size))


def device_topology(n: int, alpha_us: float, beta_us_per_mb: float, *, shared: bool) -> Topology:
    links = tuple(Link(s, d, 1, alpha_us, 0.0 if shared else beta_us_per_mb) for s in range(n) for d in range(n)
                  if s != d)
    switches = (Switch("memory", frozenset((s, d) for s in range(n) for d in range(n) if s != d), 1,
                       beta_us_per_mb),) if shared else ()
    return Topology(f"device:{n}", n, links, switches=switches)


def simulated_us(row: Measured, n: int, alpha_us: float, beta_us_per_mb: float, *, shared: bool) -> float:
    ir = BUILDERS[(row.collective, row.algorithm)](n, row.instances)
    topology = device_topology(n, alpha_us, beta_us_per_mb, shared=shared)
    return simulate(ir, topology, [row.size]).rows[0].time_us


LATENCY_MAX = 64 << 10  # rows up to this size fit the overhead and alpha (their beta term is negligible)
BANDWIDTH_MIN = 16 << 20  # rows from this size fit beta


def coefficients(rows: list[Measured], n: int, *, shared: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row: T(0, 0), the time the model charges whatever alpha and beta are (local copies and reductions at
    the simulator's own rates), and the alpha and beta coefficients T(1, 0) - T(0, 0), T(0, 1) - T(0, 0) (the
    messages and the MB on the critical path: the simulated time is linear in each for these programs)."""
    base = np.array([simulated_us(r, n, 0.0, 0.0, shared=shared) for r in rows])
    per_alpha = np.array([simulated_us(r, n, 1.0, 0.0, shared=shared) for r in rows]) - base
    per_beta = np.array([simulated_us(r, n, 0.0, 1.0, shared=shared) for r in rows]) - base
    return base, per_alpha, per_beta


def fit(rows: list[Measured], n: int, *, shared: bool) -> tuple[float, float, float]:
    """(overhead, alpha, beta): overhead and alpha by least squares (relative error) on the one-instance rows up
    to LATENCY_MAX (the model serializes the alphas of instances that share a link, which blocks on one GPU do
    not: the table shows it), then beta on the rows from BANDWIDTH_MIN with those fixed. One fit over all sizes would
    not do: the model charges alpha per tile, so large sizes push alpha to zero."""
    base, per_alpha, per_beta = coefficients(rows, n, shared=shared)
    measured = np.array([r.us for r in rows])
    small = np.array([r.size <= LATENCY_MAX and r.instances == 1 for r in rows])
    large = np.array([r.size >= BANDWIDTH_MIN for r in rows])
    w = 1.0 / measured
    lhs = np.stack([np.ones(len(rows)), per_alpha], axis=1)
    (overhead, alpha), *_ = np.linalg.lstsq((lhs * w[:, None])[small], ((measured - base) * w)[small], rcond=None)
    # Beta from the large rows with no alpha term: physically their messages overlap (see above), while the
    # model would charge 16 instances' alphas in series per tile and leave nothing for beta to explain.
    rest = measured - base - overhead
    (beta,), *_ = np.linalg.lstsq((per_beta * w)[large][:, None], (rest * w)[large], rcond=None)
    return float(overhead), float(alpha), float(beta)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, default=DEFAULT_RESULTS)
    parser.add_argument("--ranks", type=int, default=8)
    args = parser.parse_args()
    rows = read_rows(args.results)
    if not rows:
        print(f"no measured rows in {args.results}")
        return 2
    print(f"{len(rows)} measured rows from {args.results.name}")
    fits = {shared: fit(rows, args.ranks, shared=shared) for shared in (False, True)}
    predicted = {shared: [c + simulated_us(r, args.ranks, a, b, shared=shared) for r in rows]
                 for shared, (c, a, b) in fits.items()}
    latency_rows = [i for i, r in enumerate(rows) if r.size <= LATENCY_MAX and r.instances == 1]
    bandwidth_rows = [i for i, r in enumerate(rows) if r.size >= BANDWIDTH_MIN]
    for shared, (c, a, b) in fits.items():
        error = {i: abs(p - r.us) / r.us for i, (p, r) in enumerate(zip(predicted[shared], rows, strict=True))}
        worst_latency = max(error[i] for i in latency_rows)
        bandwidth = sorted(error[i] for i in bandwidth_rows)
        print(f"{'shared memory' if shared else 'independent links':<17}: overhead {c:6.2f} us, alpha {a:5.2f} us, "
              f"beta {b:7.3f} us/MB ({1e3 / b if b > 0 else float('inf'):7.1f} GB/s per "
              f"{'device' if shared else 'link'}); error: 1-instance rows <= {format_size(LATENCY_MAX)} max "
              f"{worst_latency:.1%}, rows >= {format_size(BANDWIDTH_MIN)} median {np.median(bandwidth):.1%} "
              f"max {bandwidth[-1]:.1%}")
    print(f"\n{'collective':<10} {'algorithm':<10} {'size':>6} {'inst':>4} {'measured us':>12} {'links us':>10} "
          f"{'shared us':>10}")
    for i, row in enumerate(rows):
        print(f"{row.collective:<10} {row.algorithm:<10} {format_size(row.size):>6} {row.instances:>4} "
              f"{row.us:>12.2f} {predicted[False][i]:>10.2f} {predicted[True][i]:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
