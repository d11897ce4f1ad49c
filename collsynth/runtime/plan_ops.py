"""The plan interpreter's op handlers (collsynth.runtime.plan runs them): one function per executor op.

Each handler takes (machine, rank, threadblock, op, channel type, channel indexes on this GPU, where) and
returns False when the op must wait (nothing changed), True when it ran. Semantics, as the MSCCL++ 0.9.x
execution kernel defines them (read from microsoft/mscclpp `execution_kernel.hpp`; in our words):
* put/pws/pwsf: local src -> peer's registered buffer (through a channel; + signal; + flush on port);
  get: a peer's registered buffer -> local dst (memory channel, one entry per src/dst pair);
* re: dst0 = src0 op src1 op ... (all local); res: the same, then the result to every remote dst[1:];
  rre: dst0 = src0 (local) op every remote src[1:]; rres: the same, then the result to every remote dst[1:];
* packets (LL): ppkt: local data -> packets in a peer's scratch (over a port channel: local packets, copied as
  they are); cpkt: local data -> packets in a local
  buffer; upkt: local packets -> data; repkt: dst0 = src0 (data) op packets src[1:]; respkt: repkt, then the
  result as packets to every remote dst[1:]; recpkt: repkt, and dst1 (local) gets the result as packets;
  recspkt: recpkt, then packets to every remote dst[2:]; rppkt: local packets src0 -> packets in every remote
  dst (waits for the packets' flags). A packet read waits for its flags, so it needs no signal;
* signal/wait: one signal per channel (a wait takes one); rlxsignal/rlxwait: the same counts without the
  memory fence, so a relaxed pair orders nothing about data (a read it alone guards is a race);
* barrier: every threadblock of the GPU that reaches `barrier` with the same `barrier_id` waits until
  `num_threadblocks` have arrived (a device syncer; reusable);
* glres: multimem load-reduce of a chunk of every member of the switch group, stored to every member;
  gstore: a local chunk stored to every member; sem_release/sem_acquire: GPU-local semaphores; nop.
Data visibility uses vector clocks per rank: a write is stamped with its writer's clock; another rank may
read it only after a (non-relaxed) wait that took a signal the writer sent after the write, directly or
through other ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from collsynth.runtime.result import LAYOUT

RACE = "race"  # a read of data another rank wrote before the reader synchronized with it, or a write under DMA


class PlanFailure(Exception):
    """What the interpreter reports: a failure kind, one line, details."""

    def __init__(self, kind: str, message: str, details: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.kind, self.message, self.details = kind, message, tuple(details)


Handler = Callable[[Any, int, Any, Any, str, list[int], str], bool]


def _local(buff: Mapping[str, Any]) -> tuple[str, int, int]:
    if "type" not in buff:
        raise PlanFailure(LAYOUT, f"buffer entry {dict(buff)} is not a local buffer; give type, index, size")
    return str(buff["type"]), int(buff["index"]), int(buff["size"])


def _remote_ref(m: Any, rank: int, tb: Any, kind: str, buff: Mapping[str, Any], what: str) -> tuple[int, str]:
    """(owner rank, buffer type) of a remote buffer entry, through the threadblock's refs of `kind`."""
    if "buffer_id" not in buff:
        raise PlanFailure(LAYOUT, f"{what}: a remote buffer entry needs buffer_id (into the {kind} refs)")
    refs = [b for entry in tb.get("remote_buffer_refs", []) if entry["access_channel_type"] == kind
            for b in entry["remote_buffer_ids"]]
    info = m.gpus[rank]["remote_buffers"][refs[buff["buffer_id"]]]
    return int(info["rank"]), str(info["type"])


def _read_remote(m: Any, rank: int, tb: Any, kind: str, buff: Any, what: str) -> np.ndarray:
    owner, buf = _remote_ref(m, rank, tb, kind, buff, what)
    return m._read(owner, rank, buf, int(buff["index"]), int(buff["size"]), what)


def _write_remote(m: Any, rank: int, tb: Any, kind: str, buff: Any, data: np.ndarray, what: str,
                  packets: bool = False) -> None:
    owner, buf = _remote_ref(m, rank, tb, kind, buff, what)
    m._write(owner, rank, buf, int(buff["index"]), int(buff["size"]), data, what, packets)


def _packets_ready(m: Any, rank: int, buffs: Sequence[Any]) -> bool:
    for buff in buffs:
        storage, rows = m._slot(rank, *_local(buff), "packet read", packets=True)
        if not m.ranks[rank].packet[storage][rows].all():
            return False
    return True


def op_put(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str,
           packets: bool = False, read_packets: bool = False) -> bool:
    srcs, dsts = op.get("src_buff", []), op.get("dst_buff", [])
    if not channels or len(dsts) != len(channels) or not srcs:
        raise PlanFailure(LAYOUT, f"{what} needs one dst_buff per channel id and a src_buff")
    for k, channel in enumerate(channels):
        peer = m.peers[rank][kind][channel]
        src = srcs[min(k, len(srcs) - 1)]
        data = m._read(rank, rank, *_local(src), what, packets=read_packets)
        owner, buf = _remote_ref(m, rank, tb, kind, dsts[k], what)
        if owner != peer:
            raise PlanFailure(LAYOUT, f"{what} puts through a channel to rank {peer} into a buffer of rank {owner}")
        m._write(peer, rank, buf, int(dsts[k]["index"]), int(dsts[k]["size"]), data, what, packets)
        if kind == "port":
            m._start_dma(rank, channel, src, what, packets=packets)
    return True


def op_ppkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    if kind != "port":
        return op_put(m, rank, tb, op, kind, channels, what, packets=True)
    # Over a port channel the executor DMAs the source as it is, twice its size (execution_kernel's put-packet
    # "assume src and dst are in packet format"): the source must already hold packets, written by cpkt.
    for src in op.get("src_buff", []):
        state = m.ranks[rank]
        try:
            storage, rows = m._slot(rank, *_local(src), what, packets=True)
            plain = state.written[storage][rows].all() and not state.packet[storage][rows].all()
        except PlanFailure:  # its doubled offset is past the buffer: it was meant as plain data
            plain = True
        if plain:
            raise PlanFailure(LAYOUT, f"{what} puts plain data in packets over a port channel; MSCCL++ copies a "
                              "port ppkt's source as it is, so it must hold packets already (cpkt them first)")
    return op_put(m, rank, tb, op, kind, channels, what, packets=True, read_packets=True)


def op_rppkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    src = op["src_buff"][0]
    if not _packets_ready(m, rank, [src]):
        return False
    return op_put(m, rank, tb, op, kind, channels, what, packets=True, read_packets=True)


def op_get(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    srcs, dsts = op.get("src_buff", []), op.get("dst_buff", [])
    if not srcs or len(srcs) != len(dsts):
        raise PlanFailure(LAYOUT, f"{what} needs one local dst_buff per remote src_buff")
    for src, dst in zip(srcs, dsts, strict=True):
        m._write(rank, rank, *_local(dst), _read_remote(m, rank, tb, kind, src, what), what)
    return True


def op_signal(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str,
              relaxed: bool = False) -> bool:
    for channel in channels:
        m._signal(rank, kind, channel, relaxed)
    return True


def op_rlxsignal(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return op_signal(m, rank, tb, op, kind, channels, what, relaxed=True)


def op_wait(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str,
            relaxed: bool = False) -> bool:
    if any(not m.inbox.get((rank, kind, channel)) for channel in channels):
        return False
    for channel in channels:
        m._take_signal(rank, kind, channel, relaxed)
    return True


def op_rlxwait(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return op_wait(m, rank, tb, op, kind, channels, what, relaxed=True)


def op_flush(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    for channel in channels:
        m.unflushed[(rank, channel)] = 0
    if not any(m.unflushed.get((rank, c)) for c in range(len(m.peers[rank]["port"]))):
        for flags in m.ranks[rank].in_flight:
            flags[...] = False
    return True


def op_pws(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return op_put(m, rank, tb, op, kind, channels, what) and op_signal(m, rank, tb, op, kind, channels, what)


def op_pwsf(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return op_pws(m, rank, tb, op, kind, channels, what) and op_flush(m, rank, tb, op, kind, channels, what)


def op_copy(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str,
            packets_in: bool = False, packets_out: bool = False) -> bool:
    src, dst = op["src_buff"][0], op["dst_buff"][0]
    if packets_in and not _packets_ready(m, rank, [src]):
        return False
    data = m._read(rank, rank, *_local(src), what, packets=packets_in)
    m._write(rank, rank, *_local(dst), data, what, packets_out)
    return True


def op_upkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return op_copy(m, rank, tb, op, kind, channels, what, packets_in=True)


def op_cpkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return op_copy(m, rank, tb, op, kind, channels, what, packets_out=True)


def _reduced(m: Any, rank: int, tb: Any, kind: str, srcs: Sequence[Any], what: str, remote: bool = False,
             packets: bool = False) -> np.ndarray:
    """src0 (local data) op every further source (remote data, local packets or local data)."""
    total: np.ndarray = m._read(rank, rank, *_local(srcs[0]), what)
    for src in srcs[1:]:
        value = (_read_remote(m, rank, tb, kind, src, what) if remote
                 else m._read(rank, rank, *_local(src), what, packets=packets))
        total = m.reduce(total, value)
    return total


def _reduce_op(m: Any, rank: int, tb: Any, op: Any, kind: str, what: str, *, remote_srcs: bool = False,
               packets: bool = False, local_dsts: int = 1, send: bool = False) -> bool:
    """The reduce family: reduce the sources into dst0; with packets, dst1 (local_dsts=2) gets the result as
    packets; with send, every further dst is remote and gets it (as packets in packet mode)."""
    srcs, dsts = op.get("src_buff", []), op.get("dst_buff", [])
    if len(srcs) < 1 or len(dsts) < local_dsts or (send and len(dsts) == local_dsts):
        raise PlanFailure(LAYOUT, f"{what} needs a local src0, dst0{' and dst1' if local_dsts == 2 else ''}"
                          f"{' and remote dsts' if send else ''}")
    if packets and not _packets_ready(m, rank, srcs[1:]):
        return False
    total = _reduced(m, rank, tb, kind, srcs, what, remote=remote_srcs, packets=packets)
    m._write(rank, rank, *_local(dsts[0]), total, what)
    if local_dsts == 2:
        m._write(rank, rank, *_local(dsts[1]), total, what, True)
    for dst in dsts[local_dsts:] if send else ():
        _write_remote(m, rank, tb, kind, dst, total, what, packets)
    return True


def op_re(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what)


def op_res(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, send=True)


def op_rre(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, remote_srcs=True)


def op_rres(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, remote_srcs=True, send=True)


def op_repkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, packets=True)


def op_respkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, packets=True, send=True)


def op_recpkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, packets=True, local_dsts=2)


def op_recspkt(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return _reduce_op(m, rank, tb, op, kind, what, packets=True, local_dsts=2, send=True)


def _switch(m: Any, rank: int, tb: Any, buff: Mapping[str, Any]) -> tuple[str, tuple[int, ...]]:
    local = [cid for entry in tb["channels"] if entry["channel_type"] == "switch" for cid in entry["channel_ids"]]
    return m.switches[rank][local[buff["switch_channel_id"]]]  # type: ignore[no-any-return]


def op_glres(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    src, dst = op["src_buff"][0], op["dst_buff"][0]
    buf, group = _switch(m, rank, tb, src)
    total = None
    for member in sorted(group):
        data = m._read(member, rank, buf, int(src["index"]), int(src["size"]), what)
        total = data if total is None else m.reduce(total, data)
    assert total is not None  # a switch group has members (schema-checked)
    out_buf, out_group = _switch(m, rank, tb, dst)
    for member in out_group:
        m._write(member, rank, out_buf, int(dst["index"]), int(dst["size"]), total, what)
    return True


def op_gstore(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    src, dst = op["src_buff"][0], op["dst_buff"][0]
    data = m._read(rank, rank, *_local(src), what)
    out_buf, out_group = _switch(m, rank, tb, dst)
    for member in out_group:
        m._write(member, rank, out_buf, int(dst["index"]), int(dst["size"]), data, what)
    return True


def op_sem_release(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    for sid in op["semaphore_ids"]:
        m.ranks[rank].semaphores[sid] += 1
    return True


def op_sem_acquire(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    semaphores = m.ranks[rank].semaphores
    if any(semaphores[sid] < op["semaphore_ids"].count(sid) for sid in op["semaphore_ids"]):
        return False
    for sid in op["semaphore_ids"]:
        semaphores[sid] -= 1
    return True


def op_barrier(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    """Arrive once (a ticket), then pass when the ticket's round of `num_threadblocks` arrivals is full."""
    key, size = (rank, int(op["barrier_id"])), int(op["num_threadblocks"])
    ticket = m.barrier_tickets.get((rank, tb["id"]))
    if ticket is None:
        ticket = m.barrier_arrivals.get(key, 0)
        m.barrier_arrivals[key] = ticket + 1
        m.barrier_tickets[(rank, tb["id"])] = ticket
    if m.barrier_arrivals[key] < (ticket // size + 1) * size:
        return False
    del m.barrier_tickets[(rank, tb["id"])]
    return True


def op_nop(m: Any, rank: int, tb: Any, op: Any, kind: str, channels: list[int], what: str) -> bool:
    return True


HANDLERS: Mapping[str, Handler] = {
    "put": op_put, "pws": op_pws, "pwsf": op_pwsf, "get": op_get, "signal": op_signal, "wait": op_wait,
    "rlxsignal": op_rlxsignal, "rlxwait": op_rlxwait, "flush": op_flush, "copy": op_copy,
    "re": op_re, "res": op_res, "rre": op_rre, "rres": op_rres,
    "ppkt": op_ppkt, "rppkt": op_rppkt, "cpkt": op_cpkt, "upkt": op_upkt, "repkt": op_repkt, "respkt": op_respkt,
    "recpkt": op_recpkt, "recspkt": op_recspkt, "glres": op_glres, "gstore": op_gstore,
    "sem_release": op_sem_release, "sem_acquire": op_sem_acquire, "barrier": op_barrier, "nop": op_nop,
}
