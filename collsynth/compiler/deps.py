"""Dependency passes: insert_dependencies, prune_dependencies.

A step waits for another threadblock of its GPU when one of its same-rank DAG predecessors (read
after write, write after read, write after write) runs there; predecessors in its own threadblock are
ordered by the threadblock itself. Cross-rank order needs no dependency: the FIFO connections carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

from collsynth.compiler.placement import Placement

Dep = tuple[int, int]  # (threadblock, step) on the same rank; a StepRef where it names where an instr runs
Waits = tuple[Dep, ...]  # what one step waits for


@dataclass(frozen=True, slots=True)
class Dependencies:
    placement: Placement
    waits: tuple[tuple[tuple[Waits, ...], ...], ...]  # per rank, per threadblock, per step: like placement.tbs

    def waits_of(self, i: int) -> Waits:
        """What instr i's step waits for."""
        t, s = self.placement.at[i]
        return self.waits[self.placement.dag.instrs[i].rank][t][s]

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
    instrs, at = placement.dag.instrs, placement.at
    waits = []
    for rank_tbs in placement.tbs:
        rank_waits = []
        for mine, tb in enumerate(rank_tbs):
            tb_waits: list[Waits] = []
            for i in tb.instrs:
                ps = instrs[i].preds
                if len(ps) < 2:  # the usual cases, without a dict
                    ref = at[ps[0]] if ps else None
                    tb_waits.append((ref,) if ref is not None and ref.tb != mine else ())
                    continue
                latest: dict[int, int] = {}
                for p in ps:
                    t, step = at[p]
                    if t != mine and step > latest.get(t, -1):
                        latest[t] = step
                tb_waits.append(tuple(sorted(latest.items())))
            rank_waits.append(tuple(tb_waits))
        waits.append(tuple(rank_waits))
    return Dependencies(placement, tuple(waits))


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
