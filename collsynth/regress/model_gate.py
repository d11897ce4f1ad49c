"""The model gate: every synthesized frontier point, compiled and tuned, within MODEL_GATE of its own model
cost S*alpha + (R/C)*per-rank bytes*beta at the suite's smallest and largest sizes, shown beside the bound
max(S_lb*alpha, (R/C)_lb*per-rank bytes*beta).

The compiled time is the catalog's tuned time (`provenance["tuned"]`, collsynth.tune), else the entry's own
simulated time. Gated: collectives whose per-rank bytes are the nccl-tests size / ranks (AllGather,
ReduceScatter, Gather, Scatter), where the model's (R/C) * per-rank bytes is the bandwidth term.

Switch ports: the synthesizer's model charges one alpha per step however many peers a rank sends to, but an
MSCCL-IR transfer goes to one peer, and a switch port of b lanes holds each transfer for its alpha (the
simulator's switch rule), so a step in which a rank sends to k peers through one port costs at least ceil(k/b)
alphas in any MSCCL-IR program. The gate's S counts that (`port_steps`: the same as S on topologies without
switches, and wherever no port carries more transfers in a step than it has lanes); the bound column is the
synthesizer's unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from math import ceil
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collsynth.regress.case_entry import CaseEntry
    from collsynth.schedule import Algorithm

MODEL_GATE = 1.10
GATED_COLLECTIVES = frozenset({"allgather", "reducescatter", "gather", "scatter"})
MB = 1 << 20


@dataclass(frozen=True)
class ModelCheck:
    """One frontier point at one size: its model cost, compiled (tuned) time and the case's bound."""

    key: str
    case: str
    name: str
    size_bytes: int
    model_us: float
    compiled_us: float
    bound_us: float
    tuned: bool  # compiled_us is the tuned time (else the entry's own variant)

    @property
    def ratio(self) -> float:
        return self.compiled_us / self.model_us if self.model_us > 0 else float("inf")

    @property
    def passed(self) -> bool:
        return self.ratio <= MODEL_GATE

    def __str__(self) -> str:
        return (f"{self.case} {self.name} at {self.size_bytes} B: model {self.model_us:.2f} us, compiled "
                f"{self.compiled_us:.2f} us ({self.ratio:.3f}x), bound {self.bound_us:.2f} us")


@cache
def _model_terms(topology: str, collective: str) -> tuple[float, float, int, float, int]:
    """(alpha, beta, S_lb, (R/C)_lb, ranks) of a case."""
    from collsynth.collectives import make_collective
    from collsynth.encodings.bounds import lower_bound_rounds_per_chunk, lower_bound_steps
    from collsynth.synth.report import cost_model
    from collsynth.topologies import resolve_topology

    topo = resolve_topology(topology)
    coll = make_collective(collective, topo.num_ranks, 1, root=0 if collective in ("gather", "scatter") else None)
    alpha, beta = cost_model(topo)
    return (alpha, beta, lower_bound_steps(topo, coll), float(lower_bound_rounds_per_chunk(topo, coll)),
            topo.num_ranks)


def model_checks(entries: Sequence[CaseEntry]) -> list[ModelCheck]:
    """The gate's rows for every verified synthesized (SMT frontier) entry of a gated collective; one row
    per point and size (its variants collapse: the tuned time is the point's, the best variant otherwise)."""
    best: dict[tuple[str, str, int], ModelCheck] = {}
    for e in entries:
        if not (e.passed and e.source == "pareto" and e.collective in GATED_COLLECTIVES and e.chunks
                and e.steps is not None and e.rounds is not None):
            continue
        times: Mapping[int, float] = e.tuned_us or e.times_us
        tuned = bool(e.tuned_us)
        sizes = sorted(e.times_us)
        if not sizes:
            continue
        alpha, beta, s_lb, r_lb, ranks = _model_terms(e.topology, e.collective)
        for size in {sizes[0], sizes[-1]}:
            if size not in times:
                continue
            per_rank = size / ranks / MB
            model = max(e.steps, e.port_steps or 0) * alpha + e.rounds / e.chunks * per_rank * beta
            check = ModelCheck(e.key, e.case, e.name, size, model, times[size],
                               max(s_lb * alpha, r_lb * per_rank * beta), tuned)
            slot = (e.case, e.name, size)
            if slot not in best or check.compiled_us < best[slot].compiled_us:
                best[slot] = check
    return [best[k] for k in sorted(best)]


def port_steps(algorithm: Algorithm) -> int:
    """The schedule's steps, each counted as the most transfers one switch port must carry in it, per lane:
    sum over steps of max(1, max over switches of ceil(links of the step through it / its lanes))."""
    total = 0
    for step in algorithm.steps:
        links = {(send.src, send.dst) for send in step.sends}
        total += max([1] + [ceil(len(links & switch.links) / max(1, switch.bandwidth))
                            for switch in algorithm.topology.switches])
    return total
