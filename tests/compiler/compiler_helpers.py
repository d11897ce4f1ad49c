"""Helpers for the compiler tests: a data-race finder over MSCCL-IR (small IRs only: quadratic)."""

from collections import defaultdict
from graphlib import TopologicalSorter

SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
RECEIVES = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
READS_SRC = frozenset({"s", "rrc", "rrs", "rrcs", "cpy", "re"})  # src: what it sends or its local operand
WRITES_DST = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})


def races(ir):
    """Pairs of steps of one GPU that touch the same buffer position, at least one of them writing, with
    no order between them: threadblock order, waits (depid, deps), and the k-th send -> k-th receive of
    every connection. Each race: ((gpu, buffer, position), tb, step, tb, step)."""
    ids, steps = {}, []
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            for step in tb.steps:
                ids[(gpu.id, tb.id, step.s)] = len(steps)
                steps.append((gpu.id, tb, step))
    preds = [[] for _ in steps]
    sends, receives = defaultdict(list), defaultdict(list)
    for v, (g, tb, step) in enumerate(steps):
        if step.s > 0:
            preds[v].append(ids[(g, tb.id, step.s - 1)])
        if step.depid >= 0:
            preds[v].append(ids[(g, step.depid, step.deps)])
        if step.type in SENDS:
            sends[(g, tb.send, tb.chan)].append(v)
        if step.type in RECEIVES:
            receives[(tb.recv, g, tb.chan)].append(v)
    for key, vs in sends.items():
        for a, b in zip(vs, receives[key], strict=True):
            preds[b].append(a)
    reach = [0] * len(steps)  # bit u of reach[v]: u happens before v (or is v)
    for v in TopologicalSorter({v: preds[v] for v in range(len(steps))}).static_order():
        r = 1 << v
        for p in preds[v]:
            r |= reach[p]
        reach[v] = r
    touched = defaultdict(list)
    for v, (g, _, step) in enumerate(steps):
        if step.type in READS_SRC:
            for pos in range(step.srcoff, step.srcoff + step.cnt):
                touched[(g, step.srcbuf, pos)].append((v, False))
        if step.type == "re":
            for pos in range(step.dstoff, step.dstoff + step.cnt):
                touched[(g, step.dstbuf, pos)].append((v, False))
        if step.type in WRITES_DST:
            for pos in range(step.dstoff, step.dstoff + step.cnt):
                touched[(g, step.dstbuf, pos)].append((v, True))
    found = []
    for where, accesses in touched.items():
        for x, (a, a_writes) in enumerate(accesses):
            for b, b_writes in accesses[x + 1:]:
                if a != b and (a_writes or b_writes) and not (reach[a] >> b) & 1 and not (reach[b] >> a) & 1:
                    found.append((where, steps[a][1].id, steps[a][2].s, steps[b][1].id, steps[b][2].s))
    return found
