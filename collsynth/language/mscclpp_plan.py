"""Lowering of a traced MSCCLPPProgram (language/mscclpp.py) to an MSCCL++ 0.9.x execution plan dict, the format
that collsynth.emit.mscclpp_schema checks and collsynth.runtime.plan runs.

* instances: each threadblock t is repeated as t * instances + k; chunk indices follow the ReplicationPolicy
  (interleaved: index * instances + k * size; duplicated: index + k * buffer size);
* fusion (instr_fusion): put, signal on the same channel -> pws; pws, flush on a port channel -> pwsf;
* channels: the k-th threadblock (by id) of rank a that reaches rank b over a channel type uses a's k-th
  channel to b, which the plan pairs with b's k-th channel to a (the executor's pairing rule), i.e. with the
  k-th of b's threadblocks that reach a: so a signal meets the wait of the peer threadblock of the same rank
  in that order (MSCCLang's programs mostly use the same threadblock index on both sides);
* buffers: input "i", output "o"; the named scratch buffers of a rank lie one after the other in "s".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from collsynth.collectives import Collective
from collsynth.language.buffers import INPUT, OUTPUT
from collsynth.language.program import ProgramError
from collsynth.language.types import ReplicationPolicy

Operand = tuple[int, str, int, int]
MAX_BARRIERS = 16  # the executor's device syncers (MAX_DEVICE_SYNCERS)

@dataclass
class DslOp:
    """One traced MSCCL++ instruction: plan op name, channel type, peer, and its buffer operands as
    (rank, buffer, index, size); an operand on another rank is read or written through the channel."""

    name: str
    kind: str
    peer: int | None
    srcs: list[tuple[int, str, int, int]] = field(default_factory=list)
    dsts: list[tuple[int, str, int, int]] = field(default_factory=list)
    barrier: tuple[int, ...] = ()  # a barrier's threadblocks (DSL numbering)


class TracedProgram(Protocol):
    """What the lowering reads of a traced program (language/mscclpp.py's MSCCLPPProgram)."""

    name: str
    spec: Collective
    num_ranks: int
    instances: int
    protocol: str
    instr_fusion: bool
    replication_policy: ReplicationPolicy
    num_threads_per_block: int
    use_double_scratch_buffer: bool
    min_message_size: int
    max_message_size: int
    scratch: list[dict[str, int]]
    tbs: dict[tuple[int, int], list[DslOp]]
_REMOTE_SRC = {"get": 0, "rre": 1}  # which source operand is read from the peer
_REMOTE_DST = ("put", "ppkt", "rppkt", "pws", "pwsf")


class _Layout:
    """Buffer sizes and the instance mapping of chunk indices."""

    def __init__(self, prog: TracedProgram) -> None:
        self.prog = prog
        self.instances = prog.instances
        self.offsets: list[dict[str, int]] = []
        self.scratch_chunks: list[int] = []
        for named in prog.scratch:
            at, offsets = 0, {}
            for name, size in named.items():
                offsets[name] = at
                at += size * self.instances
            self.offsets.append(offsets)
            self.scratch_chunks.append(at)

    def size_of(self, rank: int, buffer: str) -> int:
        coll = self.prog.spec
        if buffer == INPUT:
            return coll.input_chunks
        return coll.output_chunks if buffer == OUTPUT else self.prog.scratch[rank][buffer]

    def place(self, operand: Operand, k: int) -> tuple[int, str, int, int]:
        """(rank, plan buffer type, index, size) of `operand` in instance k."""
        rank, buffer, index, size = operand
        if self.prog.replication_policy is ReplicationPolicy.interleaved:
            index = index * self.instances + k * size
        else:
            index = index + k * self.size_of(rank, buffer)
        if buffer in (INPUT, OUTPUT):
            return rank, "i" if buffer == INPUT else "o", index, size
        return rank, "s", self.offsets[rank][buffer] + index, size


def _fused(ops: list[DslOp]) -> list[DslOp]:
    out: list[DslOp] = []
    for op in ops:
        last = out[-1] if out else None
        same = last is not None and last.peer == op.peer and last.kind == op.kind
        if same and last is not None and op.name == "signal" and last.name == "put":
            out[-1] = DslOp("pws", last.kind, last.peer, last.srcs, last.dsts)
        elif same and last is not None and op.name == "flush" and last.name == "pws" and op.kind == "port":
            out[-1] = DslOp("pwsf", last.kind, last.peer, last.srcs, last.dsts)
        else:
            out.append(op)
    return out


def _replicated(prog: TracedProgram) -> dict[tuple[int, int], list[tuple[DslOp, int]]]:
    """(rank, plan threadblock) -> [(op, instance)], in program order."""
    out: dict[tuple[int, int], list[tuple[DslOp, int]]] = {}
    for (rank, tb), ops in sorted(prog.tbs.items()):
        ops = _fused(ops) if prog.instr_fusion else ops
        for k in range(prog.instances):
            out[(rank, tb * prog.instances + k)] = [(op, k) for op in ops]
    return out


def _channel_table(tbs: dict[tuple[int, int], list[tuple[DslOp, int]]]) -> dict[tuple[int, str, int], list[int]]:
    """(rank, kind, peer) -> the threadblocks of `rank` that use a channel of `kind` to `peer`, in order."""
    table: dict[tuple[int, str, int], set[int]] = {}
    for (rank, tb), ops in tbs.items():
        for op, _ in ops:
            if op.peer is not None and op.kind in ("memory", "port"):
                table.setdefault((rank, op.kind, op.peer), set()).add(tb)
    return {key: sorted(value) for key, value in table.items()}


class _Gpu:
    """One rank's plan: its channels and remote buffers, and its threadblocks' refs. The k-th threadblock (in
    id order) of a rank that talks to a peer over a channel type uses that rank's k-th channel to the peer,
    which the plan pairs with the peer's k-th channel back; both ranks declare as many channels as the busier
    side needs."""

    def __init__(self, rank: int, table: dict[tuple[int, str, int], list[int]]) -> None:
        self.rank = rank
        self.users: dict[tuple[str, int], list[int]] = {}
        counts: dict[tuple[str, int], int] = {}
        for (owner, kind, peer), users in table.items():
            if owner == rank:
                self.users[(kind, peer)] = users
                counts[(kind, peer)] = max(counts.get((kind, peer), 0), len(users))
            elif peer == rank:
                counts[(kind, owner)] = max(counts.get((kind, owner), 0), len(users))
        self.channels = sorted((kind, peer, k) for (kind, peer), count in counts.items() for k in range(count))
        self.remote: list[tuple[int, str, str]] = []
        self.barriers: dict[tuple[int, ...], int] = {}

    def barrier_id(self, tbs: tuple[int, ...]) -> int:
        """One device syncer per distinct set of threadblocks that meet at a barrier."""
        if tbs not in self.barriers:
            if len(self.barriers) == MAX_BARRIERS:
                raise ProgramError(f"rank {self.rank}: more than {MAX_BARRIERS} distinct barriers (the executor's "
                                   "device syncers); reuse threadblock sets")
            self.barriers[tbs] = len(self.barriers)
        return self.barriers[tbs]

    def channel_id(self, kind: str, peer: int, tb: int) -> int:
        slot = self.users[(kind, peer)].index(tb)
        return [c for c in self.channels if c[0] == kind].index((kind, peer, slot))

    def remote_id(self, owner: int, buffer: str, kind: str) -> int:
        key = (owner, buffer, kind)
        if key not in self.remote:
            self.remote.append(key)
        return self.remote.index(key)

    def json(self, layout: _Layout, tbs: list[dict[str, Any]]) -> dict[str, Any]:
        coll = layout.prog.spec
        return {
            "id": self.rank, "input_chunks": coll.input_chunks * layout.instances,
            "output_chunks": coll.output_chunks * layout.instances,
            "scratch_chunks": layout.scratch_chunks[self.rank], "threadblocks": tbs,
            "channels": [{"channel_type": kind, "connected_to": [peer]} for kind, peer, _ in self.channels],
            "remote_buffers": [{"rank": owner, "type": buf, "access_channel_types": [kind]}
                               for owner, buf, kind in self.remote],
            "semaphores": [],
        }


def _tb_json(gpu: _Gpu, tb: int, ops: list[tuple[DslOp, int]], layout: _Layout) -> dict[str, Any]:
    channels: dict[str, list[int]] = {}
    refs: dict[str, list[int]] = {}

    def local(operand: Operand, k: int) -> dict[str, Any]:
        _, buf, index, size = layout.place(operand, k)
        return {"type": buf, "index": index, "size": size}

    def remote(operand: Operand, k: int, kind: str) -> dict[str, Any]:
        owner, buf, index, size = layout.place(operand, k)
        gid = gpu.remote_id(owner, buf, kind)
        used = refs.setdefault(kind, [])
        if gid not in used:
            used.append(gid)
        return {"buffer_id": used.index(gid), "index": index, "size": size}

    out = []
    for op, k in ops:
        entry: dict[str, Any] = {"name": op.name, "channel_type": op.kind}
        if op.barrier:
            members = tuple(t * layout.instances + k for t in op.barrier)
            entry["barrier_id"], entry["num_threadblocks"] = gpu.barrier_id(members), len(members)
        if op.peer is not None and op.kind in ("memory", "port"):
            gid = gpu.channel_id(op.kind, op.peer, tb)
            used = channels.setdefault(op.kind, [])
            if gid not in used:
                used.append(gid)
            entry["channel_ids"] = [used.index(gid)]
        remote_src = _REMOTE_SRC.get(op.name)
        srcs = [remote(x, k, op.kind) if i == remote_src else local(x, k) for i, x in enumerate(op.srcs)]
        dsts = [remote(x, k, op.kind) if op.name in _REMOTE_DST else local(x, k) for x in op.dsts]
        if srcs:
            entry["src_buff"] = srcs
        if dsts:
            entry["dst_buff"] = dsts
        out.append(entry)
    return {"id": tb, "ops": out,
            "channels": [{"channel_type": kind, "channel_ids": ids} for kind, ids in channels.items()],
            "remote_buffer_refs": [{"access_channel_type": kind, "remote_buffer_ids": ids}
                                   for kind, ids in refs.items()]}


def lower_plan(prog: TracedProgram) -> dict[str, Any]:
    """The execution plan of the traced program (schema-check and run it with collsynth.runtime.plan)."""
    if not prog.tbs:
        raise ProgramError(f"MSCCLPPProgram {prog.name!r} has no operations; nothing to lower")
    layout = _Layout(prog)
    tbs = _replicated(prog)
    table = _channel_table(tbs)
    gpus = []
    for rank in range(prog.num_ranks):
        gpu = _Gpu(rank, table)
        count = max((tb + 1 for r, tb in tbs if r == rank), default=0)
        blocks = [_tb_json(gpu, tb, tbs.get((rank, tb), []), layout) for tb in range(count)]
        gpus.append(gpu.json(layout, blocks))
    coll = prog.spec
    plan = {
        "name": prog.name, "collective": coll.name, "protocol": prog.protocol, "inplace": coll.inplace,
        "reuse_resources": False, "use_double_scratch_buffer": prog.use_double_scratch_buffer,
        "buffer_alignment": 16, "min_message_size": prog.min_message_size,
        "max_message_size": prog.max_message_size, "num_threads_per_block": prog.num_threads_per_block,
        "gpus": gpus,
    }
    if coll.root is not None:  # a rooted collective's root, which the executor ignores and `collsynth run` reads
        plan["collsynth"] = {"root": coll.root}
    return plan
