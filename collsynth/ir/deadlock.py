"""Deadlock under bounded connections: does an IR run to completion when every connection holds at most
`capacity` messages (the runtime's FIFO slots, NCCL_STEPS = 8: collsynth.core.limits.FIFO_SLOTS)?

Only the control of the MSCCL semantics is run (no data): a threadblock runs its steps in order; a step
waits for its dependency flag (`depid` has published step >= `deps`), a receiving step for a message on
its connection, a sending step for room on its connection (fewer than `capacity` messages in flight); a
step that receives and sends does both at once, so it keeps the slot it reads from until its own send has
room, as in the runtime. This is the reference interpreter's scheduling (collsynth.runtime.cpu) without
buffers, so the compiler (which comes before the runtime) can refuse a deadlocking IR itself.

Why one run decides it: each connection has one sender and one receiver threadblock, and every wait is
for something only ever granted more (a flag grows, a message stays until its one receiver takes it,
room stays until the one sender fills it). A step enabled stays enabled until its threadblock takes it,
so every schedule reaches the same final state: all orders deadlock or none does.

So the run is decided without replaying it (`completes`): every wait is for one particular step to be
done (the first step of the waited-on threadblock that publishes at least the awaited step; the k-th send
of the connection before its k-th receive; its (k - capacity)-th receive before its k-th send), so all
threadblocks finish iff Kahn's algorithm over those edges and the threadblocks' order reaches every step,
which numpy does a whole level of ready steps at a time. Only a run that does not finish is replayed step
by step, to name what a stuck threadblock waits for.

A program that needs more buffering than the runtime has (e.g. two peers that each send more than
`capacity` messages to the other before receiving any) passes with unbounded FIFOs and deadlocks here.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from collsynth.core.steps import RECEIVING_TYPES, SENDING_TYPES
from collsynth.ir import NOP, Algo
from collsynth.ir.table import NOP_CODE, RECEIVES, SENDS, StepTable, step_table

Connection = tuple[int, int, int]  # (sender rank, receiver rank, channel)


def bounded_deadlock(ir: Algo, capacity: int) -> str | None:
    """None when `ir` runs to completion with connections of `capacity` messages; otherwise one line naming
    how many threadblocks are stuck and what one of them waits for (a full connection first: the cause)."""
    if capacity < 1:
        raise ValueError(f"capacity={capacity}: a connection must hold at least one message")
    if completes(ir, capacity):
        return None
    return _replay(ir, capacity)


# --- the decision: Kahn's algorithm over what every step waits for ----------------------------------------

def completes(ir: Algo, capacity: int) -> bool:
    """Whether every step runs (see the module docstring). False also where the edges would not model the
    run exactly (a connection driven by two threadblocks on one side, a dependency on a threadblock that does
    not exist, published step numbers that go down): the replay then decides. The answer is kept with the IR's
    table (the compiler's order check asks first: collsynth.compiler.checks)."""
    t = step_table(ir)  # the compiler's checks of this IR read it just before (kept), else read here
    if capacity not in t.decided:
        t.decided[capacity] = _decide(ir, t, capacity)
    return t.decided[capacity]


def _decide(ir: Algo, t: StepTable, capacity: int) -> bool:
    total = t.s.size
    if total == 0:
        return True
    gpu_ids = [gpu.id for gpu in ir.gpus]
    tb_gid = [gpu_ids[g] for g in t.tb_gpu.tolist()]
    send_key = list(zip(tb_gid, t.tb_send.tolist(), t.tb_chan.tolist(), strict=True))
    recv_key = list(zip(t.tb_recv.tolist(), tb_gid, t.tb_chan.tolist(), strict=True))
    kind = (RECEIVES[t.type] | 2 * SENDS[t.type] | 4 * (t.type == NOP_CODE)).astype(np.int8)
    publishes = t.hasdep & ((kind & 4) == 0)  # its own `s`, when done
    tb_of, lengths = t.step_tb, np.diff(t.tb_first).tolist()
    tb_gpu = t.gpu_first[t.tb_gpu].tolist()  # per global threadblock: its gpu's first global threadblock
    src, dst, blocked = [np.arange(total - 1)[tb_of[:-1] == tb_of[1:]]], [], np.zeros(total, dtype=np.int64)
    dst.append(src[0] + 1)  # threadblock order
    flags = _flag_edges(tb_of, tb_gpu, lengths, t.depid, t.deps, publishes, t.s, blocked)
    if flags is None:
        return False
    messages = _message_edges(kind, tb_of, send_key, recv_key, capacity, blocked)
    if messages is None:
        return False
    for edges in (flags, messages):
        src.append(edges[0])
        dst.append(edges[1])
    left = unreached(total, np.concatenate(src), np.concatenate(dst), blocked)
    return not left.any()


def _flag_edges(tb_of: np.ndarray, tb_gpu: list[int], lengths: list[int], depid: np.ndarray, deps: np.ndarray,
                publishes: np.ndarray, s: np.ndarray,
                blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """A step waiting for flag >= d of threadblock D waits for D's first publishing step whose `s` >= d (the
    flag only grows: it is the `s` of D's last done publishing step); none: it never runs (`blocked`)."""
    waiting = np.flatnonzero((depid >= 0) & (deps >= 0))  # a wait for flag >= -1 or less is met from the start
    pub = np.flatnonzero(publishes)
    pub_tb, pub_s = tb_of[pub], s[pub]
    if pub.size and (pub_s.min() < 0 or np.any((pub_tb[1:] == pub_tb[:-1]) & (pub_s[1:] < pub_s[:-1]))):
        return None
    if not waiting.size:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    local = depid[waiting]
    sizes = np.bincount(np.asarray(tb_gpu, dtype=np.int64), minlength=len(lengths))  # tbs per gpu, at its first
    first = np.asarray(tb_gpu, dtype=np.int64)[tb_of[waiting]]
    if np.any(local >= sizes[first]):
        return None
    target = first + local
    top = int(max(int(pub_s.max(initial=0)), int(deps[waiting].max()))) + 2
    keys = pub_tb * top + pub_s
    at = np.searchsorted(keys, target * top + deps[waiting])
    found = at < pub.size
    found[found] = pub_tb[at[found]] == target[found]
    blocked[waiting[~found]] += 1
    return pub[at[found]], waiting[found]


def _message_edges(kind: np.ndarray, tb_of: np.ndarray, send_key: list[Connection], recv_key: list[Connection],
                   capacity: int,
                   blocked: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The k-th receive of a connection waits for its k-th send; its k-th send for its (k - capacity)-th
    receive (room). A wait for a message or a receive that never comes blocks the step for good."""
    sends, recvs = np.flatnonzero(kind & 2), np.flatnonzero(kind & 1)
    ids: dict[Connection, int] = {}
    send_conn = np.fromiter((ids.setdefault(k, len(ids)) for k in send_key), dtype=np.int64, count=len(send_key))
    recv_conn = np.fromiter((ids.setdefault(k, len(ids)) for k in recv_key), dtype=np.int64, count=len(recv_key))
    nconn = len(ids)
    # one threadblock per side of a connection, else the counts are shared and the replay decides
    for conn, steps in ((send_conn, sends), (recv_conn, recvs)):
        used = np.unique(tb_of[steps])
        if np.unique(conn[used]).size != used.size:
            return None
    s_order, s_rank, s_count = _queue(send_conn[tb_of[sends]], nconn)
    r_order, r_rank, r_count = _queue(recv_conn[tb_of[recvs]], nconn)
    sends, recvs = sends[s_order], recvs[r_order]
    s_conn, r_conn = send_conn[tb_of[sends]], recv_conn[tb_of[recvs]]
    s_first = np.concatenate([[0], np.cumsum(s_count)])
    r_first = np.concatenate([[0], np.cumsum(r_count)])
    # receive k <- send k
    has = r_rank < s_count[r_conn]
    blocked[recvs[~has]] += 1
    src = [sends[s_first[r_conn[has]] + r_rank[has]]]
    dst = [recvs[has]]
    # send k <- receive k - capacity
    room = s_rank >= capacity
    need = s_rank[room] - capacity
    conn = s_conn[room]
    has = need < r_count[conn]
    blocked[sends[room][~has]] += 1
    src.append(recvs[r_first[conn[has]] + need[has]])
    dst.append(sends[room][has])
    return np.concatenate(src), np.concatenate(dst)


def _queue(conn: np.ndarray, nconn: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Steps (in global order) grouped by connection: the permutation, each one's rank in its connection's
    queue, and the queue lengths."""
    order = np.argsort(conn, kind="stable")
    count = np.bincount(conn, minlength=nconn)
    first = np.concatenate([[0], np.cumsum(count)[:-1]])
    rank = np.arange(conn.size) - np.repeat(first, count)
    return order, rank, count


def unreached(total: int, src: np.ndarray, dst: np.ndarray, blocked: np.ndarray | None = None) -> np.ndarray:
    """Kahn's algorithm, a whole level of ready nodes at a time, over edges src -> dst (dst waits for src):
    the in-degree left on every node (all zero when everything is reached). `blocked` adds in-degree that is
    never released (a wait for something that does not exist)."""
    indegree = np.bincount(dst, minlength=total)
    if blocked is not None:
        indegree += blocked
    by_src = np.argsort(src, kind="stable")
    succ = dst[by_src]
    first = np.zeros(total + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=total), out=first[1:])
    ready = np.flatnonzero(indegree == 0)
    stamp = np.empty(total, dtype=np.int64)  # scratch for removing repeats from a level without sorting it
    while ready.size:
        starts, counts = first[ready], first[ready + 1] - first[ready]
        ends = np.cumsum(counts)
        if ends[-1] == 0:
            break
        picked = np.arange(int(ends[-1])) - np.repeat(ends - counts - starts, counts)
        targets = succ[picked]
        np.subtract.at(indegree, targets, 1)
        hit = targets[indegree[targets] == 0]  # a node with several predecessors in this level comes several times
        at = np.arange(hit.size)
        stamp[hit] = at  # a repeated node keeps one of its places (whichever): that one alone passes below
        ready = hit[stamp[hit] == at]
    return indegree


# --- the replay: which threadblocks are stuck, and on what -------------------------------------------------

@dataclass(frozen=True)
class _Op:
    where: tuple[int, int, int, str]  # gpu, tb, step, type: the label, formatted only for a message
    dep_tb: int  # global threadblock index, -1 for none
    dep_step: int
    recv: Connection | None
    send: Connection | None
    publishes: int  # the step number published when done, -1 for none

    @property
    def label(self) -> str:
        gpu, tb, s, kind = self.where
        return f"gpu {gpu} tb {tb} step {s} ({kind})"


def _ops(ir: Algo) -> list[list[_Op]]:
    """Every threadblock's steps, threadblocks numbered globally in (gpu, tb) order."""
    programs: list[list[_Op]] = []
    for gpu in ir.gpus:
        first = len(programs)
        for tb in gpu.tbs:
            programs.append([
                _Op(where=(gpu.id, tb.id, st.s, st.type),
                    dep_tb=first + st.depid if st.depid >= 0 else -1, dep_step=st.deps,
                    recv=(tb.recv, gpu.id, tb.chan) if st.type in RECEIVING_TYPES else None,
                    send=(gpu.id, tb.send, tb.chan) if st.type in SENDING_TYPES else None,
                    publishes=st.s if st.hasdep and st.type != NOP else -1)
                for st in tb.steps])
    return programs


def _replay(ir: Algo, capacity: int) -> str | None:
    """The run itself, one threadblock at a time until it waits: None when every threadblock finishes, else
    the message of `bounded_deadlock`."""
    programs = _ops(ir)
    pcs = [0] * len(programs)
    flags = [-1] * len(programs)
    in_flight: dict[Connection, int] = {}
    waiting: dict[tuple[str, object], list[int]] = {}  # ("flag", tb) / ("msg", conn) / ("room", conn) -> tbs
    ready = deque(range(len(programs)))

    def wake(key: tuple[str, object]) -> None:
        ready.extend(waiting.pop(key, ()))

    while ready:
        tb = ready.popleft()
        program, pc = programs[tb], pcs[tb]
        while pc < len(program):
            op = program[pc]
            if op.dep_tb >= 0 and flags[op.dep_tb] < op.dep_step:
                waiting.setdefault(("flag", op.dep_tb), []).append(tb)
                break
            if op.recv is not None and in_flight.get(op.recv, 0) == 0:
                waiting.setdefault(("msg", op.recv), []).append(tb)
                break
            if op.send is not None and in_flight.get(op.send, 0) >= capacity:
                waiting.setdefault(("room", op.send), []).append(tb)
                break
            if op.recv is not None:
                in_flight[op.recv] -= 1
                wake(("room", op.recv))
            if op.send is not None:
                in_flight[op.send] = in_flight.get(op.send, 0) + 1
                wake(("msg", op.send))
            if op.publishes >= 0:
                flags[tb] = op.publishes
                wake(("flag", tb))
            pc += 1
        pcs[tb] = pc
    stuck = [tb for tb, program in enumerate(programs) if pcs[tb] < len(program)]
    if not stuck:
        return None
    reasons = [_why(programs[tb][pcs[tb]], flags, in_flight) for tb in stuck]
    why = min(reasons, key=lambda r: r[0])[1]  # a full connection first: that is what bounded FIFOs add
    return (f"deadlock with connections of {capacity} message slot(s): {len(stuck)} threadblock(s) can never "
            f"finish; {why}")


def _why(op: _Op, flags: list[int], in_flight: dict[Connection, int]) -> tuple[int, str]:
    if op.dep_tb >= 0 and flags[op.dep_tb] < op.dep_step:
        return 2, f"{op.label} waits for a dependency flag"
    if op.recv is not None and in_flight.get(op.recv, 0) == 0:
        return 1, f"{op.label} waits for a message from rank {op.recv[0]} on channel {op.recv[2]}"
    assert op.send is not None
    return 0, f"{op.label} waits for a free slot on its connection to rank {op.send[1]} channel {op.send[2]}"
