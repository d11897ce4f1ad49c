"""Dependency passes: insert_dependencies, prune_dependencies.

A step waits for another threadblock of its GPU when one of its same-rank DAG predecessors (read
after write, write after read, write after write) runs there; predecessors in its own threadblock are
ordered by the threadblock itself. Cross-rank order needs no dependency: the FIFO connections carry it.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain

import numpy as np

from collsynth.compiler.placement import Placement

Dep = tuple[int, int]  # (threadblock, step) on the same rank; a StepRef where it names where an instr runs
Waits = tuple[Dep, ...]  # what one step waits for


@dataclass(frozen=True, slots=True)
class Dependencies:
    placement: Placement
    waits: tuple[tuple[tuple[Waits, ...], ...], ...]  # per rank, per threadblock, per step: like placement.tbs

    def waits_of(self, i: int) -> Waits:
        """What instr i's step waits for."""
        p = self.placement
        return self.waits[p.dag.instrs[i].rank][int(p.tb_of[i])][int(p.step_of[i])]

    @property
    def count(self) -> int:
        return sum(len(w) for rank_waits in self.waits for tb_waits in rank_waits for w in tb_waits)

    def __str__(self) -> str:
        p = self.placement
        lines = [f"dependencies: {self.count}"]
        for rank, tbs in enumerate(p.tbs):
            for t, tb in enumerate(tbs):
                lines.append(f"  r{rank} tb{t} send={tb.send} recv={tb.recv} chan={tb.chan}")
                for s, (i, waits) in enumerate(zip(tb.instrs, self.waits[rank][t], strict=True)):
                    wait = " after " + ", ".join(f"tb{a}.s{b}" for a, b in waits) if waits else ""
                    lines.append(f"    {s}: {p.dag.instrs[i]}{wait}")
        return "\n".join(lines)


def insert_dependencies(placement: Placement) -> Dependencies:
    """Each step waits for the last step it depends on in every other threadblock of its rank."""
    instrs, tb, step = placement.dag.instrs, placement.tb_of, placement.step_of
    n = len(instrs)
    preds = placement.dag.column("preds")  # made once per DAG (the scheduling passes read it too)
    count = np.fromiter(map(len, preds), dtype=np.int64, count=n)
    heads = np.fromiter(chain.from_iterable(preds), dtype=np.int64, count=int(count.sum()))
    # The usual case, for all instrs at once: one dependency, which runs in another threadblock.
    single = np.flatnonzero(count == 1)
    pred = heads[(np.cumsum(count) - count)[single]]
    other = tb[pred] != tb[single]
    waiting, waited = single[other].tolist(), pred[other]
    pairs = zip(zip(tb[waited].tolist(), step[waited].tolist(), strict=True))  # each a one-wait Waits
    waits_of: list[Waits] = [()] * n
    for i, wait in zip(waiting, pairs, strict=True):
        waits_of[i] = wait
    several = np.flatnonzero(count > 1).tolist()
    tbs, steps = (tb.tolist(), step.tolist()) if several else ([], [])
    for i in several:
        mine = tbs[i]
        latest: dict[int, int] = {}
        for p in preds[i]:
            t, s = tbs[p], steps[p]
            if t != mine and s > latest.get(t, -1):
                latest[t] = s
        waits_of[i] = tuple(sorted(latest.items()))
    step_waits = waits_of.__getitem__
    return Dependencies(placement, tuple(tuple(tuple(map(step_waits, plan.instrs)) for plan in rank_tbs)
                                         for rank_tbs in placement.tbs))


def prune_dependencies(dependencies: Dependencies) -> Dependencies:
    """Drop a wait that an earlier step of the same threadblock already covers (it waited for the same
    or a later step of that threadblock)."""
    pruned = []
    for rank_waits in dependencies.waits:
        rank_pruned = []
        for tb_waits in rank_waits:
            if sum(map(bool, tb_waits)) < 2:  # at most one step waits: nothing to cover
                rank_pruned.append(tb_waits)
                continue
            waited: dict[int, int] = {}
            kept_waits: list[Waits] = []
            for step_waits in tb_waits:
                if len(step_waits) == 1:  # the usual case: kept, or covered (dropped)
                    ((t, s),) = step_waits
                    if waited.get(t, -1) < s:
                        waited[t] = s
                        kept_waits.append(step_waits)
                    else:
                        kept_waits.append(())
                    continue
                if not step_waits:
                    kept_waits.append(step_waits)
                    continue
                kept = []
                for t, s in step_waits:
                    if waited.get(t, -1) < s:
                        kept.append((t, s))
                        waited[t] = s
                kept_waits.append(step_waits if len(kept) == len(step_waits) else tuple(kept))
            rank_pruned.append(tuple(kept_waits))
        pruned.append(tuple(rank_pruned))
    return Dependencies(dependencies.placement, tuple(pruned))
