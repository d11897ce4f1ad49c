"""Dependency passes: insert_dependencies, prune_dependencies.

A step waits for another threadblock of its GPU when one of its same-rank DAG predecessors (read
after write, write after read, write after write) runs there; predecessors in its own threadblock are
ordered by the threadblock itself. Cross-rank order needs no dependency: the FIFO connections carry it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.compiler.placement import Placement

Dep = tuple[int, int]  # (threadblock, step) on the same rank; a StepRef where it names where an instr runs
Waits = tuple[Dep, ...]  # what one step waits for


@dataclass(frozen=True, slots=True)
class Dependencies:
    placement: Placement
    waits: tuple[tuple[tuple[Waits, ...], ...], ...]  # per rank, per threadblock, per step: like placement.tbs
    # insert_dependencies' waits as arrays, for prune_dependencies (not part of the value): see `_flat_waits`
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

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
    dag, tb, step = placement.dag, placement.tb_of, placement.step_of
    n = len(dag.instrs)
    counts, tails = dag.edge_csr("preds")  # made once per DAG (the trace or the scheduling passes made it)
    heads = np.repeat(np.arange(n), counts)
    other = tb[tails] != tb[heads]  # a dependency in the instr's own threadblock needs no wait
    heads, tails = heads[other], tails[other]
    # per waiting instr and waited threadblock, the latest step waited for: sorted by instr, threadblock, step
    waited_tb, waited_step = tb[tails], step[tails]
    by_wait = _sorting(waited_step, waited_tb, heads)
    heads, waited_tb, waited_step = heads[by_wait], waited_tb[by_wait], waited_step[by_wait]
    last = np.ones(heads.size, dtype=bool)  # the last (latest step) of each (instr, threadblock)
    last[:-1] = (heads[1:] != heads[:-1]) | (waited_tb[1:] != waited_tb[:-1])
    return _Deferred.of(placement, (heads[last], waited_tb[last], waited_step[last]))


class _Deferred(Dependencies):
    """insert_dependencies' Dependencies: its waits per step are made from the waits as arrays (`cache`) when
    first read. The compiler's next pass, prune_dependencies, reads only the arrays (at 1024 ranks the millions
    of per-step Waits would be made only to be remade pruned). Equal to a Dependencies of the same waits."""

    __slots__ = ()

    @classmethod
    def of(cls, placement: Placement, flat: tuple[np.ndarray, np.ndarray, np.ndarray]) -> _Deferred:
        made = object.__new__(cls)  # (the dataclass __init__ would store the waits, which are made later here)
        _placement_slot.__set__(made, placement)
        _cache_slot.__set__(made, {"flat waits": flat})
        return made

    @property  # type: ignore[override]
    def waits(self) -> tuple[tuple[tuple[Waits, ...], ...], ...]:
        got = self.cache.get("waits")
        if got is None:
            waits_of = np.empty(len(self.placement.dag.instrs), dtype=object)
            waits_of.fill(())
            _set_waits(waits_of, *self.cache["flat waits"])
            got = self.cache["waits"] = _per_step(self.placement, waits_of)
        return got  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Dependencies):
            return NotImplemented
        return self.placement == other.placement and self.waits == other.waits

    __hash__ = None  # type: ignore[assignment]


_placement_slot, _cache_slot = Dependencies.__dict__["placement"], Dependencies.__dict__["cache"]


def _set_waits(waits_of: np.ndarray, instr: np.ndarray, tbs: np.ndarray, steps: np.ndarray) -> None:
    """Store each instr's waits as (threadblock, step) pairs in threadblock order, from every wait of those
    instrs as arrays (sorted by instr, then threadblock), into the object array `waits_of` (by instr)."""
    first = np.ones(instr.size, dtype=bool)
    first[1:] = instr[1:] != instr[:-1]
    alone = first.copy()  # the usual case: one wait (a one-pair Waits each, made without a Python step)
    alone[:-1] &= first[1:]
    waits_of[instr[alone]] = np.fromiter(zip(zip(tbs[alone].tolist(), steps[alone].tolist(), strict=True)),
                                         dtype=object, count=int(alone.sum()))
    several = np.flatnonzero(~alone)
    if several.size:
        pairs_of = list(zip(tbs[several].tolist(), steps[several].tolist(), strict=True))
        starts = np.flatnonzero(first[several]).tolist()
        for i, start, end in zip(instr[several][starts].tolist(), starts, [*starts[1:], len(pairs_of)], strict=True):
            waits_of[i] = tuple(pairs_of[start:end])


def _per_step(placement: Placement, waits_of: np.ndarray) -> tuple[tuple[tuple[Waits, ...], ...], ...]:
    """The waits of every step, per rank and threadblock as placement.tbs holds them, from the waits by instr."""
    step_waits = waits_of.tolist().__getitem__
    return tuple(tuple(tuple(map(step_waits, plan.instrs)) for plan in rank_tbs) for rank_tbs in placement.tbs)


def _sorting(*keys: np.ndarray) -> np.ndarray:
    """The order that sorts by the last key, then the one before, ... (np.lexsort's), as one argsort of the keys
    packed into one int64 where they fit (all keys are ints >= 0)."""
    packed = np.zeros(keys[0].size, dtype=np.int64)
    scale = 1
    for key in keys:
        top = int(key.max(initial=0)) + 1
        if scale * top >= 1 << 62:
            return np.lexsort(keys)
        packed += key * scale
        scale *= top
    return np.argsort(packed, kind="stable")


def prune_dependencies(dependencies: Dependencies) -> Dependencies:
    """Drop a wait that an earlier step of the same threadblock already covers (it waited for the same
    or a later step of that threadblock)."""
    flat = dependencies.cache.get("flat waits")
    if flat is None:
        return _pruned_one_by_one(dependencies)
    # By arrays: a wait is covered when an earlier step of its threadblock waited for the same threadblock at the
    # same or a later step, i.e. unless it is above the running maximum of its (rank, threadblock, waited
    # threadblock) in step order (a step waits for a threadblock at most once).
    p = dependencies.placement
    instr, waited_tb, waited_step = flat
    rank, tb = p.dag.values("rank")[instr], p.tb_of[instr]
    by_group = _sorting(p.step_of[instr], waited_tb, tb, rank)
    rank, tb, group_tb, group_step = rank[by_group], tb[by_group], waited_tb[by_group], waited_step[by_group]
    starts = np.ones(by_group.size, dtype=bool)
    starts[1:] = (rank[1:] != rank[:-1]) | (tb[1:] != tb[:-1]) | (group_tb[1:] != group_tb[:-1])
    # the groups one after another on one scale, so that one running maximum serves them all
    value = (np.cumsum(starts) - 1) * (int(group_step.max(initial=0)) + 2) + group_step
    running = np.maximum.accumulate(value)
    kept = np.empty(by_group.size, dtype=bool)
    kept[by_group] = starts | (value > np.concatenate([value[:1], running[:-1]]))
    waits_of = np.empty(len(p.dag.instrs), dtype=object)
    waits_of.fill(())
    _set_waits(waits_of, instr[kept], waited_tb[kept], waited_step[kept])
    return Dependencies(p, _per_step(p, waits_of))


def _pruned_one_by_one(dependencies: Dependencies) -> Dependencies:
    """prune_dependencies for waits made by hand (no arrays of them): one threadblock at a time."""
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
