"""Reference versions (step by step, in plain Python) of what replicate_instances and insert_nops compute with
numpy: the cross-instance waits, every instance's waits as `uncovered` keeps them, and the nops. The numpy
versions must give exactly these (tests/compiler/test_instances_reference.py)."""

from itertools import accumulate, chain, repeat

from collsynth.compiler.instances import _READS_DST, _READS_SRC, _WRITES_DST
from collsynth.compiler.lowering import LTb
from collsynth.ir import NOP


def cross_instance_waits(placement, copies, interleaved=True):
    """Every position of a traced buffer replayed access by access: its last writer, its readers since."""
    instrs = placement.dag.instrs
    if copies == 1 or not interleaved or all(ins.cnt == 1 for ins in instrs):
        return {}
    positions = {}

    def of(rank, buf):
        return positions.setdefault((rank, buf), ({}, {}))

    wide = {(ins.rank, buf) for ins in instrs if ins.cnt > 1 for buf in (ins.src_buf, ins.dst_buf)}
    waits = {}
    for i, ins in enumerate(instrs):
        kind, rank, cnt = ins.kind, ins.rank, ins.cnt
        src, dst = (rank, ins.src_buf), (rank, ins.dst_buf)
        reads = [(of(*src), ins.src_off * copies)] if kind in _READS_SRC and src in wide else []
        if kind in _READS_DST and dst in wide:
            reads.append((of(*dst), ins.dst_off * copies))
        written = of(*dst) if kind in _WRITES_DST and dst in wide else None
        for k in range(copies):
            me, found = (i, k), []
            for (last_writer, readers), base in reads:
                for pos in range(base + k * cnt, base + (k + 1) * cnt):
                    w = last_writer.get(pos)
                    if w is not None and w[1] != k:
                        found.append(w)
                    readers.setdefault(pos, []).append(me)
            if written is not None:
                last_writer, readers = written
                for pos in range(ins.dst_off * copies + k * cnt, ins.dst_off * copies + (k + 1) * cnt):
                    rs = readers.pop(pos, None)
                    if rs:
                        found += [a for a in rs if a[1] != k]
                    else:
                        w = last_writer.get(pos)
                        if w is not None and w[1] != k:
                            found.append(w)
                    last_writer[pos] = me
            if found:
                waits[me] = tuple(sorted(set(found)))
    return waits


def uncovered(waits, waited):
    """The latest wait per threadblock, less those an earlier step of the same threadblock covers."""
    latest = {}
    for t, s in waits:
        if s > latest.get(t, -1):
            latest[t] = s
    kept = []
    for t, s in sorted(latest.items()):
        if waited.get(t, -1) < s:
            kept.append((t, s))
            waited[t] = s
    return kept


def instance_waits(placement, waits, copies, cross, new_ids):
    """Per threadblock instance (in instance_waits' order), its steps' waits, one step after another."""
    runs_at = placement.at
    out = []
    for tbs, rank_waits, new_id in zip(placement.tbs, waits, new_ids, strict=True):
        for tb, tb_waits in zip(tbs, rank_waits, strict=True):
            members = tb.instrs
            for k in range(copies):
                waited, steps = {}, []
                for i, step_waits in zip(members, tb_waits, strict=True):
                    both = [(dt * copies + k, ds) for dt, ds in step_waits]
                    both += [(runs_at[p].tb * copies + kp, runs_at[p].step) for p, kp in cross.get((i, k), ())]
                    steps.append(tuple((new_id[a], b) for a, b in uncovered(both, waited)))
                out.append(tuple(steps))
    return out


def with_nops(tbs):
    """insert_nops on one GPU, a step at a time."""
    new_index = []
    for tb in tbs:
        counts = list(map(len, tb.deps))
        new_index.append([at - 1 for at in accumulate(map(max, counts, repeat(1)))]
                         if max(counts, default=0) > 1 else None)
    waited = [set() for _ in tbs]
    for tb in tbs:
        for t, s in chain.from_iterable(tb.deps):
            waited[t].add(s if new_index[t] is None else new_index[t][s])
    new_tbs = []
    for t, tb in enumerate(tbs):
        columns = ([], [], [], [], [], [], [], [], [])
        for k, deps in enumerate(tb.deps):
            line = tb.lines[k]
            deps = tuple((a, b) if new_index[a] is None else (a, new_index[a][b]) for a, b in deps)
            for dep in deps[1:]:
                for column, value in zip(columns, (NOP, "i", -1, "o", -1, 0, (dep,), False, line), strict=True):
                    column.append(value)
            row = (tb.types[k], tb.srcbufs[k], tb.srcoffs[k], tb.dstbufs[k], tb.dstoffs[k], tb.cnts[k], deps[:1],
                   None, line)
            for column, value in zip(columns, row, strict=True):
                column.append(value)
            columns[7][-1] = len(columns[0]) - 1 in waited[t]
        new_tbs.append(LTb(tb.send, tb.recv, tb.chan, *map(tuple, columns)))
    return tuple(new_tbs)
