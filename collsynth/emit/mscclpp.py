"""Lower a compiled IR (collsynth.ir.Algo) to an MSCCL++ 0.9.x execution plan (JSON-ready dict).

How each MSCCL-IR step becomes plan ops (the step facts come from collsynth.core.steps.STEP_SEMANTICS):
* a message (the k-th send on connection sender -> receiver, channel c, matched with the k-th receive there)
  lands where the receiver keeps it: straight in the receiving step's destination when that step only copies
  it (r, rcs) and nothing else on the receiver writes those chunks; otherwise in a scratch slot of its own on
  the receiver (one slot per message, so no slot is ever reused and no put can overwrite unread data);
* Simple: the sender `put`s its value into that place and `signal`s; over a port channel (another node) it
  does both and `flush`es in one request (`pwsf`), so the DMA is done before the source can change; the
  receiver `wait`s, then copies (copy) or
  reduces (re) out of the landing place as the step says;
* LL: the sender writes packets (`ppkt`) into the receiver's scratch slot; the receiver's `upkt` / `repkt`
  poll the packets' flags, so no signal or wait; the plan asks for a double scratch buffer. Over a port
  channel the executor DMAs a `ppkt`'s source as it is, so the sender first packs the value into a scratch
  slot of its own (`cpkt`) and puts those packets (then `flush`es);
* a step that forwards a computed value (rrs) computes it into a local scratch slot first, then puts it;
* scratch layout: the executor turns chunk index i into byte offset i * chunk, and a packet op doubles it
  (a packet of n bytes takes 2n), so in an LL plan plain slots (the IR's scratch, rrs values) take indices
  [0, P) and packet slots (landings, cpkt staging) start at ceil(P / 2): their bytes never overlap;
* channels: one memory channel per (peer pair, IR channel) inside a node, a port channel across nodes
  (Topology.node_of); `channels="memory"|"port"` forces one kind;
* a dependency (depid, deps) becomes a semaphore per (producer, consumer) threadblock pair: the producer
  releases after each step the consumer waits for, the consumer acquires before its step;
* a threadblock with more than 64 ops is split into pieces chained by a semaphore;
* tiles: a plan runs the whole buffer in one pass (a chunk is buffer / chunks), so the IR's tile loop
  becomes one iteration over full chunks; chunk indices stay the same.
An IR the plan format cannot express (LL128, more semaphores than the executor has) raises PlanError.
Switch-channel (NVLS) plans come from collsynth.algorithms.mscclpp: MSCCL-IR has no multimem step to lower.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from collsynth.core.errors import CollsynthError
from collsynth.core.steps import semantics
from collsynth.emit.mscclpp_fuse import fuse_reductions, read_packets_in_place
from collsynth.emit.mscclpp_schema import MAX_CHANNELS_PER_TB, MAX_OPERATIONS_PER_TB, MAX_SEMAPHORES, check_plan
from collsynth.ir import NOP, Algo, Gpu, Step, Threadblock
from collsynth.topologies.model import Topology

CHANNEL_POLICIES = ("auto", "memory", "port")


class PlanError(CollsynthError):
    """An IR that an MSCCL++ execution plan cannot express."""


class _TooManySemaphores(PlanError):
    pass


@dataclass
class _GpuPlan:
    rank: int
    channels: list[tuple[str, int, int]] = field(default_factory=list)  # (type, peer, IR channel)
    remote: list[tuple[int, str, str]] = field(default_factory=list)  # (peer, buffer, channel type)
    scratch: int = 0  # plain scratch chunks handed out (chunk indices [0, scratch))
    packet_base: int | None = None  # LL: the index of the first packet slot; None: every slot is plain
    packet_chunks: int = 0  # packet slot chunks handed out (indices from packet_base)
    semaphores: int = 0

    def channel(self, kind: str, peer: int, chan: int) -> int:
        """Index of the (declared) channel among this GPU's channels of `kind`."""
        return [c for c in self.channels if c[0] == kind].index((kind, peer, chan))

    def remote_buffer(self, peer: int, buf: str, kind: str) -> int:
        key = (peer, buf, kind)
        if key not in self.remote:
            self.remote.append(key)
        return self.remote.index(key)

    def new_scratch(self, count: int, packets: bool = False) -> int:
        """A fresh slot of `count` chunks. The executor doubles a packet op's byte offset (packets of chunks
        [i, i + n) take the bytes of chunks [2i, 2i + 2n)), so in an LL plan the plain slots take chunk
        indices [0, P) and the packet slots start at packet_base = ceil(P / 2): their bytes never meet."""
        if packets and self.packet_base is not None:
            self.packet_chunks += count
            return self.packet_base + self.packet_chunks - count
        start = self.scratch
        self.scratch += count
        if self.packet_base is not None and self.scratch > 2 * self.packet_base:
            raise PlanError(f"rank {self.rank} needs more plain scratch than was reserved before its packet slots; "
                            "this is a collsynth bug, please report it with the IR")
        return start

    @property
    def scratch_chunks(self) -> int:
        """scratch_chunks for the plan: every index fits, and (LL) 2 * scratch_chunks chunks of bytes hold the
        packet slots' doubled offsets."""
        if self.packet_base is None or not self.packet_chunks:
            return self.scratch
        return max(self.scratch, self.packet_base + self.packet_chunks)

    def new_semaphore(self) -> int:
        self.semaphores += 1
        if self.semaphores > MAX_SEMAPHORES:
            raise _TooManySemaphores(f"rank {self.rank} needs more than {MAX_SEMAPHORES} semaphores (cross-threadblock "
                            "dependencies and split threadblocks); compile with fewer threadblocks or instances")
        return self.semaphores - 1


class _Refs:
    """A plan threadblock's own channel and remote-buffer lists (ops index into them, per channel type)."""

    def __init__(self) -> None:
        self.channels: dict[str, list[int]] = {}
        self.buffers: dict[str, list[int]] = {}

    @staticmethod
    def _ref(table: dict[str, list[int]], kind: str, gpu_index: int) -> int:
        used = table.setdefault(kind, [])
        if gpu_index not in used:
            used.append(gpu_index)
        return used.index(gpu_index)

    def channel(self, kind: str, gpu_channel: int) -> int:
        return self._ref(self.channels, kind, gpu_channel)

    def buffer(self, kind: str, remote_id: int) -> int:
        return self._ref(self.buffers, kind, remote_id)


def _buf(buf: str, index: int, size: int) -> dict[str, Any]:
    return {"type": buf, "index": index, "size": size}


def ir_to_plan(ir: Algo, topology: Topology | None = None, channels: str = "auto", name: str | None = None,
               groups: int | None = None) -> dict[str, Any]:
    """The execution plan of `ir` (schema-checked). Run it through collsynth.runtime.plan before writing it.
    `groups`: plan threadblocks per rank built from the IR's (IR threadblock k in group k % groups, steps in a
    valid global order); default: one per IR threadblock, or the most groups that fit the semaphore limit."""
    if channels not in CHANNEL_POLICIES:
        raise PlanError(f"unknown channel policy {channels!r}; use one of {', '.join(CHANNEL_POLICIES)}")
    if ir.proto not in ("Simple", "LL"):
        raise PlanError(f"IR {ir.name!r} uses protocol {ir.proto}; MSCCL++ plans run Simple or LL (recompile with "
                        "--protocol Simple or LL)")
    if topology is not None and topology.num_ranks != ir.ngpus:
        raise PlanError(f"topology {topology.name} has {topology.num_ranks} ranks but the IR has {ir.ngpus}")
    # One plan threadblock per IR threadblock; when the dependencies need more semaphores than the executor
    # has, merge the IR threadblocks into fewer groups (each running its steps in a valid global order, which
    # cannot deadlock), down to one per rank.
    if groups is not None and groups < 1:
        raise PlanError(f"groups={groups}: a rank needs at least one threadblock")
    most = max((len(gpu.tbs) for gpu in ir.gpus), default=1)
    tries = [groups] if groups is not None else [None, *range(most - 1, 0, -1)]
    for k, tried in enumerate(tries):
        try:
            lowering = _Lowering(ir, topology, channels, tried)
            gpus = [lowering.gpu_json(gpu.id) for gpu in ir.gpus]
            break
        except _TooManySemaphores:
            if k == len(tries) - 1:
                raise
    plan = {
        "name": name or ir.name, "collective": ir.collective, "protocol": ir.proto, "inplace": ir.inplace,
        "reuse_resources": False, "use_double_scratch_buffer": ir.proto == "LL", "buffer_alignment": 16,
        "min_message_size": ir.min_bytes, "max_message_size": ir.max_bytes or 2**64 - 1,
        "num_threads_per_block": 1024, "gpus": gpus,
    }
    check_plan(plan)
    return plan


def plan_to_json(plan: Mapping[str, Any]) -> str:
    return json.dumps(plan, indent=2) + "\n"


class _Lowering:
    """Lowers every threadblock of every GPU; messages are matched once, up front."""

    def __init__(self, ir: Algo, topology: Topology | None, policy: str, groups: int | None) -> None:
        self.ir, self.topology, self.policy = ir, topology, policy
        self.gpus = {gpu.id: _GpuPlan(gpu.id, scratch=gpu.s_chunks,
                                      packet_base=-(-self._plain_scratch(gpu) // 2) if ir.proto == "LL" else None)
                     for gpu in ir.gpus}
        self.chunks = {gpu.id: (gpu.i_chunks, gpu.o_chunks) for gpu in ir.gpus}
        self._declare_channels()
        self.landing = self._match_messages()
        self.units = self._units(groups)
        self.sems = self._dependency_semaphores()
        self.send_order: dict[tuple[int, int, int], dict[tuple[int, int], tuple[int, int, int]]] = {}
        self.tb_ops: dict[int, list[list[dict[str, Any]]]] = {}
        for gpu in ir.gpus:
            self.tb_ops[gpu.id] = []
            for unit in self.units[gpu.id]:
                ops: list[dict[str, Any]] = []
                for tb, step in unit:
                    self._lower_step_with_sems(gpu.id, tb, step, ops)
                self.tb_ops[gpu.id].append(ops)

    @staticmethod
    def _plain_scratch(gpu: Gpu) -> int:
        """Plain scratch chunks a rank uses: the IR's scratch buffer and one slot per computed value that is
        forwarded (a receive that reduces into no destination of its own, rrs)."""
        forwarded = sum(step.cnt for tb in gpu.tbs for step in tb.steps
                        if semantics(step.type).receives and semantics(step.type).reduces
                        and not semantics(step.type).writes_dst)
        return gpu.s_chunks + forwarded

    def _units(self, groups: int | None) -> dict[int, list[list[tuple[Threadblock, Step]]]]:
        """Per rank, the plan threadblocks as lists of IR steps in execution order: one per IR threadblock
        (groups=None), or IR threadblock k in group k % groups, its steps in the global order."""
        if groups is None:
            return {gpu.id: [[(tb, step) for step in tb.steps] for tb in gpu.tbs] for gpu in self.ir.gpus}
        units: dict[int, list[list[tuple[Threadblock, Step]]]] = {
            gpu.id: [[] for _ in range(min(groups, len(gpu.tbs)))] for gpu in self.ir.gpus}
        position = {(gpu.id, tb.id): k for gpu in self.ir.gpus for k, tb in enumerate(gpu.tbs)}
        for rank, tb, step in global_order(self.ir):
            units[rank][position[(rank, tb.id)] % len(units[rank])].append((tb, step))
        return units

    # --- channels and landing places --------------------------------------------------------
    def kind(self, a: int, b: int) -> str:
        if self.policy != "auto":
            if self.policy == "memory" and self.topology is not None and \
                    self.topology.node_of(a) != self.topology.node_of(b):
                raise PlanError(f"ranks {a} and {b} are on different nodes; memory channels work inside a node "
                                "(use channels=auto or port)")
            return self.policy
        if self.topology is None:
            return "memory"
        return "memory" if self.topology.node_of(a) == self.topology.node_of(b) else "port"

    def _declare_channels(self) -> None:
        """One channel per (peer pair, IR channel) on both ranks, sorted by (type, peer, IR channel): the k-th
        channel of a type from r to p then meets the k-th from p to r, which is how the executor pairs them."""
        for gpu in self.ir.gpus:
            for tb in gpu.tbs:
                for peer in {tb.send, tb.recv} - {-1}:
                    kind = self.kind(gpu.id, peer)
                    for a, b in ((gpu.id, peer), (peer, gpu.id)):
                        if (kind, b, tb.chan) not in self.gpus[a].channels:
                            self.gpus[a].channels.append((kind, b, tb.chan))
        for plan in self.gpus.values():
            plan.channels.sort()

    def _match_messages(self) -> dict[tuple[int, int, int], tuple[str, int]]:
        """(receiver, tb, step s) -> where the message lands on the receiver (buffer, chunk index)."""
        sends: dict[tuple[int, int, int], list[tuple[int, int, Step]]] = defaultdict(list)
        recvs: dict[tuple[int, int, int], list[tuple[int, int, Step]]] = defaultdict(list)
        writes: dict[tuple[int, str, int], int] = defaultdict(int)
        for gpu in self.ir.gpus:
            for tb in gpu.tbs:
                for step in tb.steps:
                    sem = semantics(step.type)
                    if sem.sends:
                        sends[(gpu.id, tb.send, tb.chan)].append((gpu.id, tb.id, step))
                    if sem.receives:
                        recvs[(tb.recv, gpu.id, tb.chan)].append((gpu.id, tb.id, step))
                    if sem.writes_dst:
                        for k in range(step.cnt):
                            writes[self._storage(gpu.id, step.dstbuf, step.dstoff + k)] += 1
        landing: dict[tuple[int, int, int], tuple[str, int]] = {}
        for key, received in recvs.items():
            if len(received) != len(sends.get(key, [])):
                raise PlanError(f"connection {key[0]} -> {key[1]} channel {key[2]} has {len(sends.get(key, []))} "
                                f"sends but {len(received)} receives; the IR does not pair its messages")
            for (rank, tb_id, step), (_, _, sent) in zip(received, sends[key], strict=True):
                if sent.cnt != step.cnt:
                    raise PlanError(f"gpu {rank} tb {tb_id} step {step.s} receives {step.cnt} chunk(s) but the "
                                    f"matching send carries {sent.cnt}")
                direct = (self.ir.proto == "Simple" and step.type in ("r", "rcs")
                          and all(writes[self._storage(rank, step.dstbuf, step.dstoff + k)] == 1
                                  for k in range(step.cnt)))
                landing[(rank, tb_id, step.s)] = ((step.dstbuf, step.dstoff) if direct
                                               else ("s", self.gpus[rank].new_scratch(step.cnt, packets=True)))
        return landing

    def _storage(self, rank: int, buf: str, index: int) -> tuple[int, str, int]:
        """Where chunk `index` of `buf` lives (in-place IRs alias input and output); the rank's own input
        chunks count as written once already."""
        ic, oc = self.chunks[rank]
        if not self.ir.inplace or buf == "s":
            return (rank, buf, index)
        offset = (rank * ic if ic < oc else 0) if buf == "i" else (rank * oc if oc < ic else 0)
        return (rank, "io", offset + index)

    def _dependency_semaphores(self) -> dict[tuple[int, int, int], list[tuple[str, int]]]:
        """(rank, tb, step s) -> semaphore ops to do before ('acquire', id) or after ('release', id) the step."""
        ops: dict[tuple[int, int, int], list[tuple[str, int]]] = defaultdict(list)
        for gpu in self.ir.gpus:
            unit_of = {tb.id: u for u, unit in enumerate(self.units[gpu.id]) for tb, _ in unit}
            pair_sem: dict[tuple[int, int], int] = {}  # (producer IR threadblock, consumer unit) -> semaphore
            for u, unit in enumerate(self.units[gpu.id]):
                acquired: dict[int, int] = {}
                for tb, step in unit:
                    if step.depid < 0 or unit_of[step.depid] == u or step.deps <= acquired.get(step.depid, -1):
                        continue  # none, ordered within the unit already, or acquired before
                    acquired[step.depid] = step.deps
                    pair = (step.depid, u)
                    if pair not in pair_sem:
                        pair_sem[pair] = self.gpus[gpu.id].new_semaphore()
                    ops[(gpu.id, tb.id, step.s)].append(("acquire", pair_sem[pair]))
                    ops[(gpu.id, step.depid, step.deps)].append(("release", pair_sem[pair]))
        return ops

    # --- threadblocks -------------------------------------------------------------------------
    def _lower_step_with_sems(self, rank: int, tb: Threadblock, step: Step, out: list[dict[str, Any]]) -> None:
        key = (rank, tb.id, step.s)
        out += [{"name": "sem_acquire", "semaphore_ids": [sid]} for what, sid in self.sems.get(key, [])
                if what == "acquire"]
        if step.type != NOP:
            self._lower_step(self.gpus[rank], tb, step, out)
        out += [{"name": "sem_release", "semaphore_ids": [sid]} for what, sid in self.sems.get(key, [])
                if what == "release"]

    def _lower_step(self, gpu: _GpuPlan, tb: Threadblock, step: Step, out: list[dict[str, Any]]) -> None:
        sem = semantics(step.type)
        rank, cnt, ll = gpu.rank, step.cnt, self.ir.proto == "LL"
        value: tuple[str, int] | None = (step.srcbuf, step.srcoff) if sem.reads_src else None
        if sem.receives:
            land = self.landing[(rank, tb.id, step.s)]
            if not ll:
                kind = self.kind(rank, tb.recv)
                out.append({"name": "wait", "channel_type": kind,
                            "channel_ids": [gpu.channel(kind, tb.recv, tb.chan)]})
            target = (step.dstbuf, step.dstoff) if sem.writes_dst else None
            if sem.reduces:
                if target is None:
                    target = ("s", gpu.new_scratch(cnt))
                assert value is not None
                srcs = [_buf(*value, cnt), _buf(*land, cnt)] if ll else [_buf(*land, cnt), _buf(*value, cnt)]
                out.append({"name": "repkt" if ll else "re", "src_buff": srcs, "dst_buff": [_buf(*target, cnt)],
                                "reduce_op": "sum"})
                value = target
            else:
                if target is not None and (ll or target != land):  # LL: packets never land in place
                    out.append({"name": "upkt" if ll else "copy", "src_buff": [_buf(*land, cnt)],
                                    "dst_buff": [_buf(*target, cnt)]})
                value = target if target is not None else land
        elif step.type == "cpy":
            out.append({"name": "copy", "src_buff": [_buf(step.srcbuf, step.srcoff, cnt)],
                            "dst_buff": [_buf(step.dstbuf, step.dstoff, cnt)]})
        elif step.type == "re":
            out.append({"name": "re", "src_buff": [_buf(step.dstbuf, step.dstoff, cnt),
                                                       _buf(step.srcbuf, step.srcoff, cnt)],
                            "dst_buff": [_buf(step.dstbuf, step.dstoff, cnt)], "reduce_op": "sum"})
        if sem.sends:
            assert value is not None
            self._send(gpu, tb, step, value, out)

    def _send(self, gpu: _GpuPlan, tb: Threadblock, step: Step, value: tuple[str, int],
              out: list[dict[str, Any]]) -> None:
        peer, rank, cnt = tb.send, gpu.rank, step.cnt
        kind = self.kind(rank, peer)
        channel = gpu.channel(kind, peer, tb.chan)
        self.gpus[peer].channel(kind, rank, tb.chan)  # the partner channel on the peer
        buf, index = self._landing_of_send(rank, tb, step)
        remote = gpu.remote_buffer(peer, buf, kind)
        ll = self.ir.proto == "LL"
        if ll and kind == "port":  # a port ppkt copies its source as it is: it must hold packets already
            staged = ("s", gpu.new_scratch(cnt, packets=True))
            out.append({"name": "cpkt", "src_buff": [_buf(*value, cnt)], "dst_buff": [_buf(*staged, cnt)]})
            value = staged
        name = "ppkt" if ll else "pwsf" if kind == "port" else "put"  # port: put, signal and flush in one request
        out.append({"name": name, "src_buff": [_buf(*value, cnt)],
                    "dst_buff": [{"buffer_id": remote, "index": index, "size": cnt}],
                    "channel_type": kind, "channel_ids": [channel]})
        if name == "put":
            out.append({"name": "signal", "channel_type": kind, "channel_ids": [channel]})
        elif ll and kind == "port":
            out.append({"name": "flush", "channel_type": kind, "channel_ids": [channel]})

    def _landing_of_send(self, rank: int, tb: Threadblock, step: Step) -> tuple[str, int]:
        """The landing place of the message this send carries (its index among the connection's sends)."""
        key = (rank, tb.send, tb.chan)
        if key not in self.send_order:
            self.send_order[key] = self._sends_on(key)
        return self.landing[self.send_order[key][(tb.id, step.s)]]

    def _sends_on(self, key: tuple[int, int, int]) -> dict[tuple[int, int], tuple[int, int, int]]:
        sender, receiver, chan = key
        sent = [(tb.id, step.s) for tb in self.ir.gpus[sender].tbs if tb.send == receiver and tb.chan == chan
                for step in tb.steps if semantics(step.type).sends]
        got = [(receiver, tb.id, step.s) for tb in self.ir.gpus[receiver].tbs if tb.recv == sender and tb.chan == chan
               for step in tb.steps if semantics(step.type).receives]
        return dict(zip(sent, got, strict=True))

    # --- JSON -----------------------------------------------------------------------------------
    def gpu_json(self, rank: int) -> dict[str, Any]:
        gpu = self.gpus[rank]
        tbs: list[dict[str, Any]] = []
        for ops in read_packets_in_place(self.tb_ops[rank]):
            for piece in self._split(gpu, fuse_reductions(ops)):
                tbs.append(self._tb_json(len(tbs), piece))
        channels = []
        for kind in ("memory", "port"):
            peers = [peer for k, peer, _ in gpu.channels if k == kind]
            if peers:
                channels.append({"channel_type": kind, "connected_to": peers})
        return {
            "id": rank, "input_chunks": self.ir.gpus[rank].i_chunks, "output_chunks": self.ir.gpus[rank].o_chunks,
            "scratch_chunks": gpu.scratch_chunks, "threadblocks": tbs, "channels": channels,
            "remote_buffers": [{"rank": peer, "type": buf, "access_channel_types": [kind]}
                               for peer, buf, kind in gpu.remote],
            "semaphores": [{"init_value": 0} for _ in range(gpu.semaphores)],
        }

    def _split(self, gpu: _GpuPlan, ops: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
        """The threadblock's ops cut into pieces of at most 64 ops and 16 channels of a type; a piece ends by
        releasing a semaphore that the next piece acquires first."""
        pieces: list[list[dict[str, Any]]] = []
        piece: list[dict[str, Any]] = []
        used: set[tuple[str, int]] = set()
        for k, op in enumerate(ops):
            channels = {(op["channel_type"], c) for c in op.get("channel_ids", [])
                        if op.get("channel_type") in ("memory", "port")}
            last = k == len(ops) - 1
            kinds = {kind for kind, _ in used | channels}
            too_many = any(sum(1 for kd, _ in used | channels if kd == kind) > MAX_CHANNELS_PER_TB for kind in kinds)
            if too_many or len(piece) + 1 + (0 if last else 1) > MAX_OPERATIONS_PER_TB:
                sid = gpu.new_semaphore()
                pieces.append(piece + [{"name": "sem_release", "semaphore_ids": [sid]}])
                piece, used = [{"name": "sem_acquire", "semaphore_ids": [sid]}], set()
            piece.append(op)
            used |= channels
        return pieces + [piece]

    @staticmethod
    def _tb_json(tb_id: int, ops: list[dict[str, Any]]) -> dict[str, Any]:
        """A plan threadblock: the GPU's channel and remote buffer ids renumbered to its own lists."""
        refs = _Refs()
        renumbered = []
        for op in ops:
            op = dict(op)
            kind = op.get("channel_type")
            if kind in ("memory", "port"):
                op["channel_ids"] = [refs.channel(kind, cid) for cid in op["channel_ids"]]
                if "dst_buff" in op:
                    op["dst_buff"] = [dict(b, buffer_id=refs.buffer(kind, b["buffer_id"])) if "buffer_id" in b
                                      else b for b in op["dst_buff"]]
            renumbered.append(op)
        return {"id": tb_id, "ops": renumbered,
                "channels": [{"channel_type": k, "channel_ids": ids} for k, ids in refs.channels.items()],
                "remote_buffer_refs": [{"access_channel_type": k, "remote_buffer_ids": ids}
                                       for k, ids in refs.buffers.items()]}


def global_order(ir: Algo) -> list[tuple[int, Threadblock, Step]]:
    """Every step of the IR in one order that MSCCL semantics allow (a step after its threadblock's previous
    step, its dependency, and the send of the message it receives). Running any subsequence of it in this
    order cannot deadlock, so one threadblock per rank may run its rank's steps in it."""
    tbs = [(gpu.id, tb) for gpu in ir.gpus for tb in gpu.tbs]
    index = {(rank, tb.id): k for k, (rank, tb) in enumerate(tbs)}
    pcs = [0] * len(tbs)
    sent: dict[tuple[int, int, int], int] = defaultdict(int)
    taken: dict[tuple[int, int, int], int] = defaultdict(int)
    order: list[tuple[int, Threadblock, Step]] = []
    moved = True
    while moved:
        moved = False
        for k, (rank, tb) in enumerate(tbs):
            while pcs[k] < len(tb.steps):
                step = tb.steps[pcs[k]]
                sem = semantics(step.type)
                if step.depid >= 0:
                    other = index[(rank, step.depid)]
                    done = [s.s for s in tbs[other][1].steps[:pcs[other]]]
                    if step.deps not in done:
                        break
                conn = (tb.recv, rank, tb.chan)
                if sem.receives and sent[conn] <= taken[conn]:
                    break
                if sem.receives:
                    taken[conn] += 1
                if sem.sends:
                    sent[(rank, tb.send, tb.chan)] += 1
                order.append((rank, tb, step))
                pcs[k] += 1
                moved = True
    if any(pc < len(tb.steps) for pc, (_, tb) in zip(pcs, tbs, strict=True)):
        raise PlanError(f"IR {ir.name!r} deadlocks under MSCCL semantics; check it with `collsynth run` first")
    return order
