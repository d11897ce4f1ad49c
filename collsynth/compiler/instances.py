"""Cross-instance waits of replicate_instances (see collsynth.compiler.lowering's docstring): with interleaved
instances, steps of different counts over the same chunks overlap across instances, so a step also waits for
the steps of other instances that touched its positions before it."""

from __future__ import annotations

from collsynth.compiler.deps import Dep
from collsynth.compiler.placement import Placement
from collsynth.ir import (
    COPY,
    RECV,
    RECV_COPY_SEND,
    RECV_REDUCE_COPY,
    RECV_REDUCE_COPY_SEND,
    RECV_REDUCE_SEND,
    REDUCE,
    SEND,
)


def uncovered(waits: list[Dep], waited: dict[int, int]) -> list[Dep]:
    """The latest wait per threadblock, less those an earlier step of the same threadblock covers."""
    latest: dict[int, int] = {}
    for t, s in waits:
        if s > latest.get(t, -1):
            latest[t] = s
    kept = []
    for t, s in sorted(latest.items()):
        if waited.get(t, -1) < s:
            kept.append((t, s))
            waited[t] = s
    return kept


# Which local slot each kind of step reads and writes (fused steps: the receive's slot; rrs stores nothing).
_READS_SRC = frozenset({SEND, COPY, REDUCE})
_READS_DST = frozenset({RECV_REDUCE_COPY, RECV_REDUCE_COPY_SEND, RECV_REDUCE_SEND, REDUCE})
_WRITES_DST = frozenset({RECV, RECV_COPY_SEND, RECV_REDUCE_COPY, RECV_REDUCE_COPY_SEND, COPY, REDUCE})

Access = tuple[int, int]  # (instr, instance)


def cross_instance_waits(placement: Placement, copies: int,
                         interleaved: bool = True) -> dict[Access, tuple[Access, ...]]:
    """For every (instr, instance) whose positions another instance touched before it, those (instr,
    instance)s: the last writer of a position it reads, the readers since the last write (else that
    write) of a position it writes. Only interleaved steps of more than one chunk can overlap other
    instances; without any (the usual case) this is empty at once."""
    instrs = placement.dag.instrs
    if copies == 1 or not interleaved or all(ins.cnt == 1 for ins in instrs):
        return {}
    # per (rank, buffer): the last writer and the readers since of every position, by position
    positions: dict[tuple[int, str], tuple[dict[int, Access], dict[int, list[Access]]]] = {}

    def of(rank: int, buf: str) -> tuple[dict[int, Access], dict[int, list[Access]]]:
        tables = positions.get((rank, buf))
        if tables is None:
            tables = positions[(rank, buf)] = ({}, {})
        return tables

    # A buffer that only one-chunk steps touch has instance k's parts at positions k (mod copies) alone: no
    # other instance touches them, so its positions are not traced.
    wide = {(ins.rank, buf) for ins in instrs if ins.cnt > 1 for buf in (ins.src_buf, ins.dst_buf)}
    waits: dict[Access, tuple[Access, ...]] = {}
    for i, ins in enumerate(instrs):  # a topological order: instrs that conflict come in program order
        kind, rank, cnt = ins.kind, ins.rank, ins.cnt
        src, dst = (rank, ins.src_buf), (rank, ins.dst_buf)
        reads = [(of(*src), ins.src_off * copies)] if kind in _READS_SRC and src in wide else []
        if kind in _READS_DST and dst in wide:
            reads.append((of(*dst), ins.dst_off * copies))
        written = of(*dst) if kind in _WRITES_DST and dst in wide else None
        if not reads and written is None:
            continue
        for k in range(copies):
            me = (i, k)
            found: list[Access] = []  # of other instances only (own instance: the DAG's dependencies)
            for (last_writer, readers), base in reads:
                first = base + k * cnt
                for pos in range(first, first + cnt):
                    w = last_writer.get(pos)
                    if w is not None and w[1] != k:
                        found.append(w)
                    rs = readers.get(pos)
                    if rs is None:
                        readers[pos] = [me]
                    else:
                        rs.append(me)
            if written is not None:
                last_writer, readers = written
                first = ins.dst_off * copies + k * cnt
                for pos in range(first, first + cnt):
                    rs = readers.pop(pos, None)
                    if rs:  # write after read; those readers already follow the last write
                        found += [a for a in rs if a[1] != k]
                    else:
                        w = last_writer.get(pos)
                        if w is not None and w[1] != k:
                            found.append(w)  # write after write
                    last_writer[pos] = me
            if found:
                waits[me] = tuple(sorted(set(found)))
    return waits
