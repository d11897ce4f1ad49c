"""Dependency passes: insert_dependencies, prune_dependencies.

A step waits for another threadblock of its GPU when one of its same-rank DAG predecessors (read
after write, write after read, write after write) runs there; predecessors in its own threadblock are
ordered by the threadblock itself. Cross-rank order needs no dependency: the FIFO connections carry it.
"""

from __future__ import annotations

from dataclasses import dataclass

from collsynth.compiler.placement import Placement

Dep = tuple[int, int]  # (threadblock, step) on the same rank


@dataclass(frozen=True)
class Dependencies:
    placement: Placement
    deps: tuple[tuple[Dep, ...], ...]  # per instr

    @property
    def count(self) -> int:
        return sum(len(d) for d in self.deps)

    def __str__(self) -> str:
        p = self.placement
        lines = [f"dependencies: {self.count}"]
        for rank, tbs in enumerate(p.tbs):
            for t, tb in enumerate(tbs):
                lines.append(f"  r{rank} tb{t} send={tb.send} recv={tb.recv} chan={tb.chan}")
                for s, i in enumerate(tb.instrs):
                    wait = " after " + ", ".join(f"tb{a}.s{b}" for a, b in self.deps[i]) if self.deps[i] else ""
                    lines.append(f"    {s}: {p.dag.instrs[i]}{wait}")
        return "\n".join(lines)


def insert_dependencies(placement: Placement) -> Dependencies:
    """Each instr waits for the last step it depends on in every other threadblock of its rank."""
    preds, tb_of, step_of = placement.dag.preds, placement.tb_of, placement.step_of
    deps: list[tuple[Dep, ...]] = []
    for i, ps in enumerate(preds):
        mine = tb_of[i]
        if len(ps) < 2:  # the usual cases, without a dict
            t = tb_of[ps[0]] if ps else mine
            deps.append(((t, step_of[ps[0]]),) if t != mine else ())
            continue
        latest: dict[int, int] = {}
        for p in ps:
            t = tb_of[p]
            if t != mine and step_of[p] > latest.get(t, -1):
                latest[t] = step_of[p]
        deps.append(tuple(sorted(latest.items())))
    return Dependencies(placement, tuple(deps))


def prune_dependencies(dependencies: Dependencies) -> Dependencies:
    """Drop a wait that an earlier step of the same threadblock already covers (it waited for the same
    or a later step of that threadblock)."""
    placement = dependencies.placement
    deps = list(dependencies.deps)
    for tbs in placement.tbs:
        for tb in tbs:
            waited: dict[int, int] = {}
            for i in tb.instrs:
                if not deps[i]:
                    continue
                kept = []
                for t, s in deps[i]:
                    if waited.get(t, -1) < s:
                        kept.append((t, s))
                        waited[t] = s
                deps[i] = tuple(kept)
    return Dependencies(placement, tuple(deps))
