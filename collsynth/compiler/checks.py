"""check_ir: the compiler's own checks on the IR before anything is emitted.

Runtime limits (steps per threadblock, cnt, channels) with the DSL line that broke them; per-connection
order (the k-th send on a connection has the size of the k-th receive, and both sides agree on the
count); no dependency cycles (threadblock order + waits + send->receive matching, checked with one
topological sweep); then collsynth.ir.validate for everything the MSCCL loaders refuse.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

import numpy as np

from collsynth.compiler.errors import CompileError
from collsynth.ir import MAX_CHANNELS, MAX_COUNT, MAX_STEPS_PER_TB, NOP, RECEIVING_TYPES, SENDING_TYPES, Algo, Step
from collsynth.ir.deadlock import completes, unreached
from collsynth.ir.table import RECEIVES, SENDS, StepTable, step_table
from collsynth.language.program import where

Lines = Sequence[Sequence[Sequence[int]]]  # per gpu, per threadblock, per step: the DSL line (0: none)


def check_ir(ir: Algo, lines: Lines | None = None, *, order: bool = True, source: str = "",
             max_steps: int | None = MAX_STEPS_PER_TB, slots: int | None = None) -> Algo:
    """Return the IR unchanged, or raise CompileError naming the limit or rule, where, and the DSL line.
    `max_steps`: steps per threadblock (MSCCL's default; None when a target's own limit is checked later).
    `slots`: the runtime's messages per connection, where the caller checks next that the IR runs with that many
    (collsynth.ir.deadlock): the order check then decides that first, and the answer is kept for the caller."""

    def at(g: int, t: int, s: int) -> str:
        line = lines[g][t][s] if lines is not None else 0
        return where(line, source)

    _check_limits(ir, at, max_steps)
    if order and not _in_order(ir, slots):  # the step-by-step checks name the first problem
        connections = _connections(ir)
        _check_connections(connections, at)
        _check_cycles(ir, at, connections)
    from collsynth.ir.validate import validate

    validate(ir, max_steps_per_tb=max_steps)
    return ir


def _check_limits(ir: Algo, at, max_steps: int | None) -> None:  # type: ignore[no-untyped-def]
    table = _table(ir)
    cnt_ok = table is not None and int(table.cnt.max(initial=0)) <= MAX_COUNT
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
            if cnt_ok or max(map(_CNT, tb.steps), default=0) <= MAX_COUNT:
                continue
            for step in tb.steps:
                if step.cnt > MAX_COUNT:
                    raise CompileError(f"{at(gpu.id, tb.id, step.s)}a step moves {step.cnt} chunks; MSCCL moves at "
                                       f"most {MAX_COUNT} per step (cnt): split the reference (ref.split(k))")


_CNT = attrgetter("cnt")


def _table(ir: Algo) -> StepTable | None:
    """The IR's step table, kept for the checks that follow (validate, the deadlock check); None where a field
    is no integer (the step-by-step checks then run)."""
    try:
        return step_table(ir, keep=True)
    except (TypeError, ValueError, OverflowError):
        return None


def _in_order(ir: Algo, slots: int | None = None) -> bool:
    """Whether the order checks below pass, all steps at once over the IR's table: every connection (sender,
    receiver, channel) has one sending and one receiving threadblock, its k-th send and k-th receive have one
    count, and all steps are reached by Kahn's algorithm over threadblock order, waits and send -> receive.
    False where any of that fails or a wait names no step: the step-by-step checks then decide and name it.
    With `slots`, the last part is decided by the deadlock check's graph where that reaches every step (below)."""
    t = _table(ir)
    if t is None:
        return False
    gpu_ids = np.array([gpu.id for gpu in ir.gpus], dtype=np.int64)
    tb_gid = gpu_ids[t.tb_gpu]
    sending, receiving = SENDS[t.type], RECEIVES[t.type]
    sends, recvs = np.flatnonzero(sending), np.flatnonzero(receiving)
    if sends.size != recvs.size:
        return False
    if sends.size:
        keys = np.concatenate([np.stack([tb_gid, t.tb_send, t.tb_chan], axis=1),
                               np.stack([t.tb_recv, tb_gid, t.tb_chan], axis=1)])
        _, conn = np.unique(keys, axis=0, return_inverse=True)
        conn = conn.reshape(-1)
        ntbs = t.tb_id.size
        send_conn, recv_conn = conn[:ntbs], conn[ntbs:]
        sender_tbs, receiver_tbs = np.unique(t.step_tb[sends]), np.unique(t.step_tb[recvs])
        # one threadblock per side of every connection, and the same connections on both sides
        if np.unique(send_conn[sender_tbs]).size != sender_tbs.size or \
                not np.array_equal(np.sort(send_conn[sender_tbs]), np.sort(recv_conn[receiver_tbs])):
            return False
        sends = sends[np.argsort(send_conn[t.step_tb[sends]], kind="stable")]  # by connection, then in order
        recvs = recvs[np.argsort(recv_conn[t.step_tb[recvs]], kind="stable")]
        if not np.array_equal(send_conn[t.step_tb[sends]], recv_conn[t.step_tb[recvs]]) or \
                not np.array_equal(t.cnt[sends], t.cnt[recvs]):
            return False
    lengths = np.diff(t.tb_first)
    waiting = np.flatnonzero(t.depid >= 0)
    gpu = t.tb_gpu[t.step_tb[waiting]]
    local, first = t.depid[waiting], t.gpu_first[gpu]
    if np.any(local >= t.gpu_first[gpu + 1] - first):
        return False
    target, step = first + local, t.deps[waiting]
    if np.any(step < 0) or np.any(step >= lengths[target]):
        return False
    # The deadlock check's graph (collsynth.ir.deadlock) has this threadblock order and these send -> receive pairs
    # (the k-th of each connection; one threadblock per side, checked above); for a wait of step w for step d of
    # threadblock D, an edge p -> w from D's first publishing step p with s >= d (none: w never runs, so not every
    # step is reached). With every `s` its step's index, p is d or after it: d -> ... -> p -> w. So each edge below
    # is a path there, and when that graph reaches every step (no cycle), this one has no cycle either.
    if slots is not None and np.array_equal(t.s, t.index) and completes(ir, slots):
        return True
    in_order = np.flatnonzero(t.step_tb[:-1] == t.step_tb[1:])
    src = np.concatenate([in_order, t.tb_first[target] + step, sends])
    dst = np.concatenate([in_order + 1, waiting, recvs])
    return not unreached(t.s.size, src, dst).any()


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


def _check_connections(connections: tuple[dict, dict], at) -> None:  # type: ignore[no-untyped-def,type-arg]
    senders, receivers = connections
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


def _check_cycles(ir: Algo, at, connections: tuple[dict, dict]) -> None:  # type: ignore[no-untyped-def,type-arg]
    """Kahn's algorithm over all steps: threadblock order, waits, and the k-th send -> k-th receive. Level by
    level with numpy (the levels are the longest path, far fewer than the steps)."""
    steps: list[Step] = []
    sizes: list[int] = []  # steps per threadblock, threadblocks numbered globally in (gpu, tb) order
    gpu_first: list[int] = []  # the global number of every gpu's threadblock 0
    for gpu in ir.gpus:
        gpu_first.append(len(sizes))
        for tb in gpu.tbs:
            sizes.append(len(tb.steps))
            steps.extend(tb.steps)
    total = len(steps)
    size = np.asarray(sizes, dtype=np.int64)
    first = np.zeros(size.size + 1, dtype=np.int64)  # id of step 0 of every threadblock
    np.cumsum(size, out=first[1:])
    tb_of = np.repeat(np.arange(size.size), size)
    in_order = np.flatnonzero(tb_of[:-1] == tb_of[1:])  # threadblock order: step -> next step
    depid = np.fromiter(map(attrgetter("depid"), steps), dtype=np.int64, count=total)
    waiting = np.flatnonzero(depid >= 0)
    deps = np.fromiter(map(attrgetter("deps"), steps), dtype=np.int64, count=total)[waiting]
    gpu_of = np.repeat(np.arange(len(gpu_first)), np.diff(np.append(gpu_first, size.size)))
    waited = first[np.asarray(gpu_first, dtype=np.int64)[gpu_of[tb_of[waiting]]] + depid[waiting]] + deps
    src, dst = [in_order, waited], [in_order + 1, waiting]
    base = np.asarray(gpu_first, dtype=np.int64)
    senders, receivers = connections
    for key, (stb, sends, _) in senders.items():
        rtb, recvs, _ = receivers[key]
        src.append(first[base[key[0]] + stb] + np.asarray(sends, dtype=np.int64))
        dst.append(first[base[key[1]] + rtb] + np.asarray(recvs, dtype=np.int64))
    indegree = unreached(total, np.concatenate(src), np.concatenate(dst))
    if np.count_nonzero(indegree):
        for g, gpu in enumerate(ir.gpus):
            for t, tb in enumerate(gpu.tbs):
                for step in tb.steps:
                    if indegree[first[gpu_first[g] + t] + step.s] > 0 and step.type != NOP:
                        raise CompileError(f"{at(gpu.id, tb.id, step.s)}dependency cycle: rank {gpu.id} threadblock "
                                           f"{tb.id} step {step.s} can never run (its waits, its threadblock's order "
                                           "and the connections' message order form a loop)")
