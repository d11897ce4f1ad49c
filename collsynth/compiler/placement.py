"""Placement passes: assign_channels, schedule (in compiler/scheduling.py), assign_threadblocks.

MSCCL runs each (sender, receiver, channel) connection as one FIFO driven by exactly one threadblock
on each side, and a threadblock has one send peer, one receive peer and one channel. So:
- `assign_channels` gives every transfer a channel. A fused step (rcs/rrs/rrcs) receives and sends in
  one threadblock, so the whole chain of fused steps a chunk flows through shares one channel, and on
  each channel a rank may pair a receive peer with only one send peer: the smallest channel that keeps
  every rank's pairing consistent is chosen (hints win).
- `schedule` orders all instrs in one global topological order by critical-path priority (depth
  first, then longest remaining path), receiving on each connection in the order of sending, and never
  with more than `slots` messages of one connection sent but not yet received (the runtime's FIFO depth,
  NCCL_STEPS). Running the order one step at a time is then a complete run with bounded FIFOs, so every
  threadblock's step list (a subsequence of this order) cannot deadlock, even when a threadblock both
  sends to and receives from one peer (two peers that each sent more than `slots` messages before
  receiving would wait for each other forever).
- `assign_threadblocks` maps each instr to a threadblock: manual hints first (checked), then one
  threadblock per connection, fused pairs first, then plain sends/receives paired with the
  threadblock their data comes from / goes to, local copies and reductions to the least loaded one.
"""

from __future__ import annotations

import heapq

import numpy as np

from collsynth.compiler.dag import FUSED_TYPES, InstrDAG, transfer_chain
from collsynth.compiler.errors import CompileError
from collsynth.compiler.forms import ChannelledDAG, Placement, Schedule, TbPlan
from collsynth.compiler.forms import StepRef as StepRef  # (the forms' old home: importers may still name it here)
from collsynth.compiler.paths import stable_order
from collsynth.ir import COPY, MAX_CHANNELS, RECEIVING_TYPES, REDUCE, SEND, SENDING_TYPES

# --- assign_channels -----------------------------------------------------------------------------

def assign_channels(dag: InstrDAG) -> ChannelledDAG:
    """A channel per instr: hints where given, else the smallest channel on which every fused step of
    the chunk's chain pairs its receive peer with its send peer consistently (default 0)."""
    unfused = _unfused_channels(dag)
    if unfused is not None:
        return ChannelledDAG(dag, tuple(unfused.tolist()), {"channel": unfused})
    instrs = dag.instrs
    channel = [-1] * len(instrs)
    pair_recv: dict[tuple[int, int, int], int] = {}  # (rank, recv peer, ch) -> send peer of its threadblock
    pair_send: dict[tuple[int, int, int], int] = {}  # (rank, send peer, ch) -> recv peer
    chains: list[tuple[list[int], set[int]]] = []
    for head, ins in enumerate(instrs):
        if ins.kind != SEND:
            continue
        j = ins.send_to
        if instrs[j].kind not in FUSED_TYPES:  # a send and its receive: no peers to pair, the hint or channel 0
            a, b = ins.ch_hint, instrs[j].ch_hint
            if a >= 0 and b >= 0 and a != b:
                raise CompileError(f"{dag.where(j)}one chunk's fused transfers carry different channel hints "
                                   f"{sorted((a, b))}; give them one channel")
            channel[head] = channel[j] = max(a, b, 0)
            continue
        chain = transfer_chain(instrs, head)
        hints = {instrs[m].ch_hint for m in chain} - {-1}
        if len(hints) > 1:
            raise CompileError(f"{dag.where(chain[-1])}one chunk's fused transfers carry different channel hints "
                               f"{sorted(hints)}; give them one channel")
        chains.append((chain, hints))
    chains.sort(key=lambda item: not item[1])  # chains with a channel hint first: the others work around them
    for chain, hints in chains:
        head = chain[0]
        fused = chain[1:-1]
        if hints:
            (ch,) = hints
            if not _pairing_ok(instrs, fused, ch, pair_recv, pair_send):
                raise CompileError(f"{dag.where(fused[0])}channel {ch}: a rank on this chain already forwards "
                                   "from the same peer to another peer on that channel; use another ch= hint")
        else:
            ch = next((c for c in range(MAX_CHANNELS) if _pairing_ok(instrs, fused, c, pair_recv, pair_send)), -1)
            if ch < 0:
                raise CompileError(f"{dag.where(head)}no channel below {MAX_CHANNELS} lets this chunk's fused "
                                   "transfers pair their peers consistently; give ch= hints or disable instr_fusion")
        for m in fused:
            f = instrs[m]
            pair_recv[(f.rank, f.recv_peer, ch)] = f.send_peer
            pair_send[(f.rank, f.send_peer, ch)] = f.recv_peer
        for m in chain:
            channel[m] = ch
    for i, ins in enumerate(instrs):
        if channel[i] < 0:
            if ins.kind in SENDING_TYPES or ins.kind in RECEIVING_TYPES:
                raise CompileError(f"internal error: transfer {ins} got no channel")
            channel[i] = ins.ch_hint  # local copy/reduce: any channel unless hinted
    return with_channels(dag, channel)


def _unfused_channels(dag: InstrDAG) -> np.ndarray | None:
    """assign_channels by arrays for a DAG without fused steps, where no hints disagree: a send and its receive
    take their hint (or 0), a local step its own hint (or -1, any). None otherwise (the loop words the error)."""
    if dag.is_kind(FUSED_TYPES).any():
        return None
    hint, send_to = dag.values("ch_hint"), dag.values("send_to")
    sends = np.flatnonzero(dag.is_kind({SEND}))
    receives = send_to[sends]
    a, b = hint[sends], hint[receives]
    if ((a >= 0) & (b >= 0) & (a != b)).any():
        return None
    transfers = dag.is_kind(SENDING_TYPES | RECEIVING_TYPES)
    channel = np.where(transfers, -1, hint)
    channel[sends] = channel[receives] = np.maximum(np.maximum(a, b), 0)
    if (channel[transfers] < 0).any():
        return None
    channel.flags.writeable = False
    return channel


def with_channels(dag: InstrDAG, channels: list[int]) -> ChannelledDAG:
    """The DAG with instr i on `channels[i]` (the DAG itself is shared: no record is rebuilt)."""
    if len(channels) != len(dag.instrs):
        raise ValueError(f"{len(channels)} channels for {len(dag.instrs)} instrs")
    return ChannelledDAG(dag, tuple(channels))


def _pairing_ok(instrs, fused, ch, pair_recv, pair_send) -> bool:  # type: ignore[no-untyped-def]
    for m in fused:
        f = instrs[m]
        if pair_recv.get((f.rank, f.recv_peer, ch), f.send_peer) != f.send_peer:
            return False
        if pair_send.get((f.rank, f.send_peer, ch), f.recv_peer) != f.recv_peer:
            return False
    return True


# --- assign_threadblocks -------------------------------------------------------------------------

class _Tb:
    __slots__ = ("send", "recv", "chan", "instrs", "user")

    def __init__(self, send: int, recv: int, chan: int, user: int = -1) -> None:
        self.send, self.recv, self.chan, self.user = send, recv, chan, user
        self.instrs: list[int] = []


class _RankTbs:
    """The threadblocks of one rank and its connection tables while assigning."""

    def __init__(self) -> None:
        self.tbs: list[_Tb] = []
        self.by_send: dict[tuple[int, int], int] = {}  # (send peer, ch) -> tb
        self.by_recv: dict[tuple[int, int], int] = {}  # (recv peer, ch) -> tb
        self.user: dict[int, int] = {}  # hint -> tb
        self.load: list[tuple[int, int]] = []  # heap of (steps, tb) for local ops

    def new(self, send: int, recv: int, chan: int, user: int = -1) -> int:
        t = len(self.tbs)
        self.tbs.append(_Tb(send, recv, chan, user))
        if send >= 0:
            self.by_send[(send, chan)] = t
        if recv >= 0:
            self.by_recv[(recv, chan)] = t
        heapq.heappush(self.load, (0, t))
        return t

    def set_send(self, t: int, peer: int) -> None:
        self.tbs[t].send = peer
        self.by_send[(peer, self.tbs[t].chan)] = t

    def set_recv(self, t: int, peer: int) -> None:
        self.tbs[t].recv = peer
        self.by_recv[(peer, self.tbs[t].chan)] = t

    def least_loaded(self) -> int:
        while True:
            steps, t = self.load[0]
            if steps == len(self.tbs[t].instrs):
                return t
            heapq.heapreplace(self.load, (len(self.tbs[t].instrs), t))


def assign_threadblocks(sched: Schedule, policy: str = "auto", *, pair: bool = True) -> Placement:
    """Threadblock per instr (see the module docstring); steps of a threadblock follow `sched.order`.
    `pair=False`: plain sends and receives never share a threadblock with another connection's side."""
    dag = sched.dag
    instrs, channel = dag.instrs, sched.channel
    n = len(instrs)
    ranks = [_RankTbs() for _ in range(dag.num_ranks)]
    tb_of = [-1] * n
    manual = policy == "manual"

    # 1. manual hints: the user's threadblocks, checked for one send peer / recv peer / channel each.
    if manual:
        placed = _all_hinted(sched)
        if placed is not None:
            return placed
        for i in sched.order:
            ins = instrs[i]
            if ins.tb_hint >= 0:
                tb_of[i] = _place_user(dag, ranks[ins.rank], i, channel[i])
    rest = [i for i in sched.order if tb_of[i] < 0] if manual else sched.order  # in schedule order
    # 2. fused pairs: one threadblock per (recv peer, send peer, channel), made before anything else
    #    can take one of its two sides.
    for i in rest:
        ins = instrs[i]
        if tb_of[i] < 0 and ins.kind in FUSED_TYPES:
            tb_of[i] = _place_pair(dag, ranks[ins.rank], i, channel[i])
    # 3. plain sends and receives: the connection's threadblock, else pair with a related one.
    for i in rest:
        ins = instrs[i]
        if tb_of[i] >= 0 or ins.kind in (COPY, REDUCE):
            continue
        rt, ch = ranks[ins.rank], channel[i]
        if ins.kind == SEND:
            t = rt.by_send.get((ins.send_peer, ch))
            if t is None:
                t = _partner_for_send(dag, rt, i, ch, tb_of) if pair else None
                if t is None:
                    t = rt.new(ins.send_peer, -1, ch)
                else:
                    rt.set_send(t, ins.send_peer)
        else:
            t = rt.by_recv.get((ins.recv_peer, ch))
            if t is None:
                t = _partner_for_recv(dag, rt, i, ch) if pair else None
                if t is None:
                    t = rt.new(-1, ins.recv_peer, ch)
                else:
                    rt.set_recv(t, ins.recv_peer)
        tb_of[i] = t
        rt.tbs[t].instrs.append(i)
    # 4. local copies and reductions: a hinted channel's threadblock, else the least loaded one.
    for i in rest:
        ins = instrs[i]
        if tb_of[i] >= 0:
            continue
        rt, ch = ranks[ins.rank], channel[i]
        if not rt.tbs:
            rt.new(-1, -1, max(ch, 0))
        t = rt.least_loaded()
        if ch >= 0 and rt.tbs[t].chan != ch:
            t = next((k for k, tb in enumerate(rt.tbs) if tb.chan == ch), -1)
            if t < 0:
                t = rt.new(-1, -1, ch)
        tb_of[i] = t
        rt.tbs[t].instrs.append(i)
    return _in_step_order(sched, ranks, tb_of)


def _in_step_order(sched: Schedule, ranks: list[_RankTbs], tb_of: list[int]) -> Placement:
    """The placement, each threadblock's steps in the schedule's order (a stable sort of the order by
    threadblock)."""
    dag = sched.dag
    sides = [[(t.send, t.recv, t.chan) for t in rt.tbs] for rt in ranks]
    return _placed(sched, dag.values("rank"), np.asarray(tb_of, dtype=np.int64), sides)


def _placed(sched: Schedule, rank: np.ndarray, tb_of: np.ndarray, sides: list[list[tuple[int, int, int]]]) -> Placement:
    """The placement of instr i in threadblock tb_of[i] of its rank, each rank's threadblocks with their
    (send, recv, chan) in `sides`, each threadblock's steps in the schedule's order."""
    sizes = np.asarray([len(tbs) for tbs in sides], dtype=np.int64)
    first_tb = np.concatenate([[0], np.cumsum(sizes)])
    order = sched.order_array()
    tb = first_tb[rank] + tb_of  # global threadblock of every instr
    by_tb = order[stable_order(tb[order], int(first_tb[-1]))]
    count = np.bincount(tb, minlength=int(first_tb[-1]))
    starts = np.concatenate([[0], np.cumsum(count)])
    steps, bounds = by_tb.tolist(), starts.tolist()
    plans = tuple(tuple(TbPlan(send, recv, chan, tuple(steps[bounds[g]:bounds[g + 1]]))
                        for g, (send, recv, chan) in enumerate(tbs, start=int(first_tb[r])))
                  for r, tbs in enumerate(sides))
    n = len(sched.dag.instrs)
    if order.size != n or n and (order.min() < 0 or np.bincount(order).max() != 1):
        return Placement.of(sched.dag, plans)  # (never for a schedule; `of` refuses it)
    step_of = np.empty(n, dtype=np.int64)  # what `of` derives from the plans, from the arrays they came from
    step_of[by_tb] = np.arange(n) - np.repeat(starts[:-1], count)
    return Placement(sched.dag, plans, tb_of, step_of)


def _all_hinted(sched: Schedule) -> Placement | None:
    """The manual placement at once, by arrays, when every instr has a threadblock hint and the hints agree:
    each (rank, hint) is one threadblock (numbered on its rank in the order the schedule first uses it), of at
    most one send peer, one receive peer and one channel, and no two of a rank's threadblocks share a
    connection side. This is what `_place_user` builds for such hints, and they raise no error there. None
    otherwise (instr by instr then, which also words any error)."""
    dag = sched.dag
    n = len(dag.instrs)
    column = dag.values
    hint = column("tb_hint")
    if not n or hint.min() < 0:
        return None
    rank, side = column("rank"), dag.is_kind(SENDING_TYPES) | 2 * dag.is_kind(RECEIVING_TYPES)
    order = sched.order_array()
    chan_o = sched.channels()[order]
    send_o = np.where(side & 1, column("send_peer"), -1)[order]
    recv_o = np.where(side & 2, column("recv_peer"), -1)[order]
    key = rank[order] * (int(hint.max()) + 1) + hint[order]
    if sched.dag.num_ranks * (int(hint.max()) + 1) <= 1 << 16:  # (np.unique's stable sort: a radix sort then)
        key = key.astype(np.uint16)
    keys, first, group = np.unique(key, return_index=True, return_inverse=True)
    group = group.reshape(-1)
    tb_chan = np.maximum(chan_o[first], 0)
    tb_send, tb_recv = np.full(keys.size, -1, dtype=np.int64), np.full(keys.size, -1, dtype=np.int64)
    np.maximum.at(tb_send, group, send_o)
    np.maximum.at(tb_recv, group, recv_o)
    agree = ((chan_o < 0) | (chan_o == tb_chan[group])) & ((send_o < 0) | (send_o == tb_send[group])) & (
        (recv_o < 0) | (recv_o == tb_recv[group]))
    if not agree.all():
        return None
    tb_rank = rank[order[first]]
    for peer in (tb_send, tb_recv):  # one threadblock per connection side
        used = np.flatnonzero(peer >= 0)
        ends = (tb_rank[used] * (sched.dag.num_ranks + 1) + peer[used]) * (int(tb_chan.max()) + 1) + tb_chan[used]
        if np.unique(ends).size != used.size:
            return None
    by_rank = np.lexsort((first, tb_rank))  # a rank's threadblocks in the order of their first step
    local = np.empty(keys.size, dtype=np.int64)
    starts = np.searchsorted(tb_rank[by_rank], np.arange(sched.dag.num_ranks))
    local[by_rank] = np.arange(keys.size) - starts[tb_rank[by_rank]]
    tb_of = np.empty(n, dtype=np.int64)
    tb_of[order] = local[group]
    per_rank: list[list[tuple[int, int, int]]] = [[] for _ in range(sched.dag.num_ranks)]
    for r, *sides in zip(*(a[by_rank].tolist() for a in (tb_rank, tb_send, tb_recv, tb_chan)), strict=True):
        per_rank[r].append(tuple(sides))  # type: ignore[arg-type]
    return _placed(sched, rank, tb_of, per_rank)


def _place_user(dag: InstrDAG, rt: _RankTbs, i: int, ch: int) -> int:
    ins = dag.instrs[i]
    hint = ins.tb_hint
    send = ins.send_peer if ins.kind in SENDING_TYPES else -1
    recv = ins.recv_peer if ins.kind in RECEIVING_TYPES else -1
    t = rt.user.get(hint)
    if t is None:
        chan = max(ch, 0)
        for label, peer, table in (("sends to", send, rt.by_send), ("receives from", recv, rt.by_recv)):
            other = table.get((peer, chan)) if peer >= 0 else None
            if other is not None:
                raise CompileError(f"{dag.where(i)}threadblocks {rt.tbs[other].user} and {hint} of rank {ins.rank} "
                                   f"both {label} rank {peer} on channel {chan}; one connection belongs to one "
                                   "threadblock: use the same sendtb/recvtb or another channel")
        t = rt.new(send, recv, chan, hint)
        rt.user[hint] = t
    else:
        tb = rt.tbs[t]
        if ch >= 0 and tb.chan != ch or send >= 0 and tb.send != send or recv >= 0 and tb.recv != recv:
            _join_user(dag, rt, t, i, ch, send, recv)
    rt.tbs[t].instrs.append(i)
    return t


def _join_user(dag: InstrDAG, rt: _RankTbs, t: int, i: int, ch: int, send: int, recv: int) -> None:
    """Instr i joins the user's threadblock t, which does not yet have its channel, send peer or receive peer:
    take the peer over, or refuse."""
    ins, tb = dag.instrs[i], rt.tbs[t]
    hint, at = ins.tb_hint, dag.where(i)
    if ch >= 0 and tb.chan != ch:
        raise CompileError(f"{at}threadblock {hint} of rank {ins.rank} runs channel {tb.chan}; an op on channel "
                           f"{ch} cannot join it (one channel per threadblock): use another sendtb/recvtb")
    if send >= 0 and tb.send != send:
        if tb.send >= 0:
            raise CompileError(f"{at}threadblock {hint} of rank {ins.rank} already sends to rank {tb.send}; an "
                               f"op sending to rank {send} cannot join it (one send peer per threadblock): use "
                               "another sendtb")
        if (send, tb.chan) in rt.by_send:
            raise CompileError(f"{at}rank {ins.rank} already sends to rank {send} on channel {tb.chan} from "
                               f"threadblock {rt.tbs[rt.by_send[(send, tb.chan)]].user}; use that sendtb")
        rt.set_send(t, send)
    if recv >= 0 and tb.recv != recv:
        if tb.recv >= 0:
            raise CompileError(f"{at}threadblock {hint} of rank {ins.rank} already receives from rank {tb.recv}; "
                               f"an op receiving from rank {recv} cannot join it (one receive peer per "
                               "threadblock): use another recvtb")
        if (recv, tb.chan) in rt.by_recv:
            raise CompileError(f"{at}rank {ins.rank} already receives from rank {recv} on channel {tb.chan} in "
                               f"threadblock {rt.tbs[rt.by_recv[(recv, tb.chan)]].user}; use that recvtb")
        rt.set_recv(t, recv)


def _place_pair(dag: InstrDAG, rt: _RankTbs, i: int, ch: int) -> int:
    ins = dag.instrs[i]
    ts = rt.by_send.get((ins.send_peer, ch))
    tr = rt.by_recv.get((ins.recv_peer, ch))
    if ts is not None and tr is not None and ts != tr:
        raise CompileError(f"{dag.where(i)}rank {ins.rank} forwards from rank {ins.recv_peer} to rank {ins.send_peer} "
                           f"on channel {ch}, but those connections belong to two threadblocks (hints); use one "
                           "threadblock or another channel")
    t = ts if ts is not None else tr
    if t is None:
        t = rt.new(ins.send_peer, ins.recv_peer, ch)
    else:
        tb = rt.tbs[t]
        if tb.send < 0:
            rt.set_send(t, ins.send_peer)
        if tb.recv < 0:
            rt.set_recv(t, ins.recv_peer)
        if tb.send != ins.send_peer or tb.recv != ins.recv_peer:
            raise CompileError(f"{dag.where(i)}rank {ins.rank} forwards from rank {ins.recv_peer} to rank "
                               f"{ins.send_peer} on channel {ch}, but its threadblock for that connection pairs "
                               f"rank {tb.recv} with rank {tb.send}; use another channel")
    rt.tbs[t].instrs.append(i)
    return t


def _partner_for_send(dag: InstrDAG, rt: _RankTbs, i: int, ch: int, tb_of: list[int]) -> int | None:
    """A threadblock with a free send side for a plain send: the one that received its data, else the one
    receiving from the same peer."""
    for p in dag.instrs[i].preds:
        t = tb_of[p]
        if t >= 0 and dag.instrs[p].kind in RECEIVING_TYPES and rt.tbs[t].send < 0 and rt.tbs[t].chan == ch:
            return t
    by_recv = rt.by_recv.get((dag.instrs[i].send_peer, ch))
    return by_recv if by_recv is not None and rt.tbs[by_recv].send < 0 else None


def _partner_for_recv(dag: InstrDAG, rt: _RankTbs, i: int, ch: int) -> int | None:
    """A threadblock with a free receive side for a plain receive: the one sending to the same peer."""
    t = rt.by_send.get((dag.instrs[i].recv_peer, ch))
    return t if t is not None and rt.tbs[t].recv < 0 else None
