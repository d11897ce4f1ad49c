"""check_ir: the compiler's own checks on the IR before anything is emitted.

Runtime limits (steps per threadblock, cnt, channels) with the DSL line that broke them; per-connection
order (the k-th send on a connection has the size of the k-th receive, and both sides agree on the
count); no dependency cycles (threadblock order + waits + send->receive matching, checked with one
topological sweep); then collsynth.ir.validate for everything the MSCCL loaders refuse.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from collsynth.compiler.errors import CompileError
from collsynth.ir import MAX_CHANNELS, MAX_COUNT, MAX_STEPS_PER_TB, NOP, RECEIVING_TYPES, SENDING_TYPES, Algo
from collsynth.ir.deadlock import unreached
from collsynth.language.program import where

Lines = Sequence[Sequence[Sequence[int]]]  # per gpu, per threadblock, per step: the DSL line (0: none)


def check_ir(ir: Algo, lines: Lines | None = None, *, order: bool = True, source: str = "",
             max_steps: int | None = MAX_STEPS_PER_TB) -> Algo:
    """Return the IR unchanged, or raise CompileError naming the limit or rule, where, and the DSL line.
    `max_steps`: steps per threadblock (MSCCL's default; None when a target's own limit is checked later)."""

    def at(g: int, t: int, s: int) -> str:
        line = lines[g][t][s] if lines is not None else 0
        return where(line, source)

    _check_limits(ir, at, max_steps)
    if order:
        _check_connections(ir, at)
        _check_cycles(ir, at)
    from collsynth.ir.validate import validate

    validate(ir, max_steps_per_tb=max_steps)
    return ir


def _check_limits(ir: Algo, at, max_steps: int | None) -> None:  # type: ignore[no-untyped-def]
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            if max_steps is not None and len(tb.steps) > max_steps:
                raise CompileError(f"{at(gpu.id, tb.id, max_steps)}rank {gpu.id} threadblock {tb.id} (send "
                                   f"{tb.send}, recv {tb.recv}, channel {tb.chan}) needs {len(tb.steps)} steps; MSCCL "
                                   f"runs at most {max_steps} per threadblock: spread the ops over more "
                                   "threadblocks or channels (sendtb/recvtb/ch hints), or aggregate chunks")
            if tb.chan >= MAX_CHANNELS:
                raise CompileError(f"{at(gpu.id, tb.id, 0)}rank {gpu.id} threadblock {tb.id} uses channel {tb.chan}; "
                                   f"MSCCL has channels 0..{MAX_CHANNELS - 1} (channels per instance x instances "
                                   "must stay below that): use fewer channels or instances")
            for step in tb.steps:
                if step.cnt > MAX_COUNT:
                    raise CompileError(f"{at(gpu.id, tb.id, step.s)}a step moves {step.cnt} chunks; MSCCL moves at "
                                       f"most {MAX_COUNT} per step (cnt): split the reference (ref.split(k))")


def _connections(ir: Algo) -> tuple[dict, dict]:  # type: ignore[type-arg]
    """Per connection (sender, receiver, channel): the threadblock driving each side, the `s` of its sending
    (receiving) steps and their counts."""
    senders: dict[tuple[int, int, int], tuple[int, list[int], list[int]]] = {}
    receivers: dict[tuple[int, int, int], tuple[int, list[int], list[int]]] = {}
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            sends = [s for s in tb.steps if s.type in SENDING_TYPES]
            recvs = [s for s in tb.steps if s.type in RECEIVING_TYPES]
            if sends:
                senders[(gpu.id, tb.send, tb.chan)] = (tb.id, [s.s for s in sends], [s.cnt for s in sends])
            if recvs:
                receivers[(tb.recv, gpu.id, tb.chan)] = (tb.id, [s.s for s in recvs], [s.cnt for s in recvs])
    return senders, receivers


def _check_connections(ir: Algo, at) -> None:  # type: ignore[no-untyped-def]
    senders, receivers = _connections(ir)
    for key in senders.keys() | receivers.keys():
        src, dst, chan = key
        stb, sends, scnts = senders.get(key, (-1, [], []))
        rtb, recvs, rcnts = receivers.get(key, (-1, [], []))
        if len(sends) != len(recvs):
            g, t, s = (src, stb, sends[len(recvs)]) if len(sends) > len(recvs) else (dst, rtb, recvs[len(sends)])
            raise CompileError(f"{at(g, t, s)}connection {src}->{dst} channel {chan}: {len(sends)} sends but "
                               f"{len(recvs)} receives; every send needs its receive")
        if scnts != rcnts:
            k = next(k for k, (a, b) in enumerate(zip(scnts, rcnts, strict=True)) if a != b)
            raise CompileError(f"{at(dst, rtb, recvs[k])}connection {src}->{dst} channel {chan}: message {k} is sent "
                               f"with {scnts[k]} chunks but received as {rcnts[k]}; sends and receives are out of "
                               "order")


def _check_cycles(ir: Algo, at) -> None:  # type: ignore[no-untyped-def]
    """Kahn's algorithm over all steps: threadblock order, waits, and the k-th send -> k-th receive. Level by
    level with numpy (the levels are the longest path, far fewer than the steps)."""
    base: list[list[int]] = []  # id of step 0 of every threadblock
    total = 0
    src: list[int] = []  # edges src -> dst between global step ids
    dst: list[int] = []
    for gpu in ir.gpus:
        firsts = []
        for tb in gpu.tbs:
            firsts.append(total)
            total += len(tb.steps)
        base.append(firsts)
    for gpu in ir.gpus:
        firsts = base[gpu.id]
        for tb in gpu.tbs:
            me = firsts[tb.id]
            src.extend(range(me, me + len(tb.steps) - 1))  # threadblock order
            dst.extend(range(me + 1, me + len(tb.steps)))
            for k, step in enumerate(tb.steps):
                if step.depid >= 0:
                    src.append(firsts[step.depid] + step.deps)
                    dst.append(me + k)
    senders, receivers = _connections(ir)
    for key, (stb, sends, _) in senders.items():
        rtb, recvs, _ = receivers[key]
        a, b = base[key[0]][stb], base[key[1]][rtb]
        src.extend(a + s for s in sends)
        dst.extend(b + r for r in recvs)
    indegree = unreached(total, np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64))
    done = total - int(np.count_nonzero(indegree))
    if done < total:
        for gpu in ir.gpus:
            for tb in gpu.tbs:
                for step in tb.steps:
                    if indegree[base[gpu.id][tb.id] + step.s] > 0 and step.type != NOP:
                        raise CompileError(f"{at(gpu.id, tb.id, step.s)}dependency cycle: rank {gpu.id} threadblock "
                                           f"{tb.id} step {step.s} can never run (its waits, its threadblock's order "
                                           "and the connections' message order form a loop)")
