"""The MSCCL++ plan interpreter: runs an execution plan on numpy buffers with the executor's semantics.

Semantics (MSCCL++ 0.9.x, see docs/formats.md and collsynth/emit/mscclpp_schema.py):
* every rank has input, output and scratch buffers of chunks (in-place plans alias input and output as NCCL
  does, collsynth.runtime.layout); a chunk is (larger user buffer) / chunks, the whole buffer in one pass;
* a chunk index is a byte offset (index * chunk) for plain data and twice that for packets (the executor
  doubles packet offsets; an LL plan's scratch is 2 * scratch_chunks chunks of bytes), so a plain write
  over the bytes of packets clobbers them, as on the GPU;
* a threadblock runs its ops in order; an op that cannot go on (a `wait` with no signal, a `sem_acquire` on
  a zero semaphore, a packet read of packets not yet written) blocks it; when no threadblock can move and
  work is left, that is a deadlock, reported with every stuck threadblock and what it waits for;
* memory/port channels pair in order: the k-th channel of a type from rank r to p is the partner of the k-th
  from p to r;
* what each op does, and the data-visibility rule (vector clocks carried by signals), is in
  collsynth.runtime.plan_ops; a port channel's put is a DMA the proxy does later: its source must not be
  written again, and the threadblock must not finish, before a `flush` on that channel. Every op the schema
  check accepts is run here (it refuses `pipeline` and `tbg_info`, which slice chunks by bytes).
The postcondition is checked with the runtime's own checker (collsynth.runtime.check) on inputs made exact
by layout.make_inputs.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collsynth.collectives.spec import Collective, display_name
from collsynth.emit.mscclpp_schema import check_plan
from collsynth.ir import Algo, Gpu, coll_spelling
from collsynth.runtime.check import check_outputs
from collsynth.runtime.layout import collective_for, make_inputs, plan_layout
from collsynth.runtime.numerics import number_format, reducer, reduction_op
from collsynth.runtime.plan_ops import HANDLERS, RACE, PlanFailure
from collsynth.runtime.result import DEADLOCK, LAYOUT, MISMATCH, UNWRITTEN_READ, ExecutionError, ExecutionResult

__all__ = ["RACE", "UNSUPPORTED", "checked_plan", "execute_plan", "plan_collective"]

UNSUPPORTED = "unsupported-op"
MAX_REPORTED = 20
_Failure = PlanFailure


def plan_collective(plan: Mapping[str, Any], collective: Collective | None = None) -> Collective:
    """The collective a plan computes: given, or rebuilt from its name and buffer sizes (root from the
    `collsynth.root` extra key for rooted collectives)."""
    skeleton = Algo(name=str(plan["name"]), collective=coll_spelling(str(plan["collective"])),
                    proto=str(plan["protocol"]), nchannels=1, nchunksperloop=1, ngpus=len(plan["gpus"]),
                    inplace=bool(plan["inplace"]),
                    gpus=tuple(Gpu(g["id"], g["input_chunks"], g["output_chunks"], g["scratch_chunks"], ())
                               for g in plan["gpus"]))
    root = plan.get("collsynth", {}).get("root") if isinstance(plan.get("collsynth"), Mapping) else None
    return collective_for(skeleton, collective, root)


def execute_plan(plan: Mapping[str, Any], nbytes: int | None = None, dtype: str = "float32", seed: int = 0,
                 op: str = "sum", collective: Collective | None = None) -> ExecutionResult:
    """Check the plan's schema, run it on every rank's buffers and check the collective's postcondition.
    Raises PlanSchemaError for a malformed plan; everything the plan does wrong is a FAIL result."""
    check_plan(plan)
    fmt = number_format(dtype)
    op = reduction_op(op)
    coll = plan_collective(plan, collective)
    skeleton = Algo(name="plan", collective=coll.name, proto="Simple", nchannels=1, nchunksperloop=1,
                    ngpus=coll.num_ranks, inplace=coll.inplace, gpus=(Gpu(0, coll.input_chunks, coll.output_chunks,
                                                                          0, ()),))
    layout = plan_layout(skeleton, coll, nbytes, fmt)
    inputs = make_inputs(layout, fmt, seed, op)

    def result(passed: bool, failure: str | None, message: str, details: Sequence[str] = (),
               outputs: tuple[np.ndarray, ...] = (), seconds: float = 0.0, ops_run: int = 0) -> ExecutionResult:
        return ExecutionResult(passed=passed, message=message, collective=display_name(coll.name),
                               ngpus=coll.num_ranks, nbytes=layout.input_chunks * layout.chunk_elems * fmt.itemsize,
                               dtype=fmt.name, backend="mscclpp-plan", seconds=seconds, outputs=outputs,
                               inputs=tuple(x.reshape(-1) for x in inputs), failure=failure, details=tuple(details),
                               chunk_elems=layout.chunk_elems, steps_run=ops_run, op=op)

    for gpu in plan["gpus"]:
        if gpu["input_chunks"] != coll.input_chunks or gpu["output_chunks"] not in (0, coll.output_chunks):
            return result(False, LAYOUT, f"gpu {gpu['id']} has input_chunks={gpu['input_chunks']}, output_chunks="
                          f"{gpu['output_chunks']} but {coll} has {coll.input_chunks} and {coll.output_chunks}")
    started = time.perf_counter()
    machine = None
    try:
        machine = _Machine(plan, coll, layout.chunk_elems, inputs, fmt, op)
        ops_run = machine.run()
    except _Failure as failure:
        return result(False, failure.kind, failure.message, failure.details,
                      machine.outputs() if machine else (), time.perf_counter() - started)
    seconds = time.perf_counter() - started
    outputs = machine.outputs()
    outcome = check_outputs(coll, inputs, [out.reshape(coll.output_chunks, -1) for out in outputs], exact=True,
                            written=machine.output_written(), op=op, dtype=fmt)
    if not outcome.passed:
        return result(False, MISMATCH, outcome.message, outcome.details, outputs, seconds, ops_run)
    return result(True, None, f"{outcome.message}; {ops_run} ops", (), outputs, seconds, ops_run)


@dataclass
class _Rank:
    """One rank's buffers: storage arrays, where each buffer lives in them, written bits, remote writers."""

    storages: list[np.ndarray]
    places: dict[str, tuple[int, int, int]]  # buffer -> (storage, first chunk, chunks)
    written: list[np.ndarray]
    writer: list[np.ndarray]  # rank that wrote the chunk last (-1: nobody)
    writer_seq: list[np.ndarray]  # the writer's own vector-clock entry at the write
    packet: list[np.ndarray]  # chunk holds packets (LL): readable by upkt/repkt without a wait
    in_flight: list[np.ndarray]  # chunk is the source of an unflushed port put
    semaphores: list[int] = field(default_factory=list)


class _Machine:
    def __init__(self, plan: Mapping[str, Any], coll: Collective, elems: int, inputs: list[np.ndarray], fmt: Any,
                 op: str) -> None:
        self.plan, self.gpus = plan, plan["gpus"]
        self.reduce = reducer(fmt, op)
        self.ranks = [self._rank(gpu, coll, elems, inputs[r]) for r, gpu in enumerate(self.gpus)]
        n = len(self.gpus)
        self.peers = [{kind: [p for ch in gpu["channels"] if ch["channel_type"] == kind for p in ch["connected_to"]]
                       for kind in ("memory", "port")} for gpu in self.gpus]
        self.switches = [[(ch["buffer_type"], tuple(group["ranks"])) for ch in gpu["channels"]
                          if ch["channel_type"] == "switch" for group in ch["rank_groups"]] for gpu in self.gpus]
        self.partner = self._pair_channels()
        # (rank, type, channel) -> signals not yet waited for: the sender's vector clock (None: relaxed)
        self.inbox: dict[tuple[int, str, int], deque[np.ndarray | None]] = {}
        self.clock = np.zeros((n, n), dtype=np.int64)  # clock[r]: what rank r has synchronized with
        self.unflushed: dict[tuple[int, int], int] = {}  # (rank, port channel) -> puts since the last flush
        self.barrier_arrivals: dict[tuple[int, int], int] = {}  # (rank, barrier id) -> arrivals so far
        self.barrier_tickets: dict[tuple[int, int], int] = {}  # (rank, tb) -> its arrival number, while waiting

    def _rank(self, gpu: Mapping[str, Any], coll: Collective, elems: int, data: np.ndarray) -> _Rank:
        # An LL plan's scratch holds scratch_chunks chunks of packets, twice as many bytes as of data
        # (ExecutionPlan::calScratchBufferSize); a storage row is one chunk of bytes.
        ic, oc = coll.input_chunks, coll.output_chunks
        sc = gpu["scratch_chunks"] * (2 if self.plan["protocol"] == "LL" else 1)
        rank = gpu["id"]
        if coll.inplace:
            size = max(ic, oc)
            start_i = rank * ic if ic < oc else 0
            start_o = rank * oc if oc < ic else 0
            shared = np.zeros((size, elems), dtype=data.dtype)
            shared[start_i:start_i + ic] = data
            storages = [shared, np.zeros((sc, elems), dtype=data.dtype)]
            places = {"i": (0, start_i, ic), "o": (0, start_o, oc), "s": (1, 0, sc)}
            written = [np.zeros(size, dtype=bool), np.zeros(sc, dtype=bool)]
            written[0][start_i:start_i + ic] = True
            owner = [np.full(size, -1), np.full(sc, -1)]
            owner[0][start_i:start_i + ic] = rank
        else:
            storages = [data.copy(), np.zeros((oc, elems), dtype=data.dtype), np.zeros((sc, elems), dtype=data.dtype)]
            places = {"i": (0, 0, ic), "o": (1, 0, oc), "s": (2, 0, sc)}
            written = [np.ones(ic, dtype=bool), np.zeros(oc, dtype=bool), np.zeros(sc, dtype=bool)]
            owner = [np.full(ic, rank), np.full(oc, -1), np.full(sc, -1)]
        sizes = [len(s) for s in storages]
        return _Rank(storages, places, written, owner, [np.zeros(k, dtype=np.int64) for k in sizes],
                     [np.zeros(k, dtype=bool) for k in sizes], [np.zeros(k, dtype=bool) for k in sizes],
                     [int(s["init_value"]) for s in gpu.get("semaphores", [])])

    def _pair_channels(self) -> dict[tuple[int, str, int], int]:
        """(rank, type, channel) -> the partner channel's index on the peer (k-th to p pairs with k-th to r)."""
        partner: dict[tuple[int, str, int], int] = {}
        for rank, peers in enumerate(self.peers):
            for kind, listed in peers.items():
                for index, peer in enumerate(listed):
                    ordinal = listed[:index].count(peer)
                    back = [j for j, q in enumerate(self.peers[peer][kind]) if q == rank]
                    if ordinal >= len(back):
                        raise _Failure(LAYOUT, f"rank {rank}'s {kind} channel {index} to rank {peer} has no partner "
                                       f"channel on rank {peer}; declare the channel on both ranks")
                    partner[(rank, kind, index)] = back[ordinal]
        return partner

    # --- buffers -------------------------------------------------------------------------------
    def _slot(self, rank: int, buf: str, index: int, size: int, what: str, packets: bool = False,
              ) -> tuple[int, slice]:
        """The storage rows (chunks of bytes) that chunks [index, index + size) of `buf` occupy. The executor
        turns a chunk index into the byte offset index * chunk size for every op, and a packet op doubles it
        (a packet carries its data and as many bytes of flags): packets of chunks [i, i + n) take the bytes of
        chunks [2i, 2i + 2n), in the same space as plain data."""
        storage, start, count = self.ranks[rank].places[buf]
        first, rows = (2 * index, 2 * size) if packets else (index, size)
        if index < 0 or size < 1 or first + rows > count:
            kind = f" as packets (bytes of chunks [{first}, {first + rows}))" if packets else ""
            raise _Failure(LAYOUT, f"{what} addresses rank {rank} {buf}[{index}:{index + size}]{kind} but the buffer "
                           f"holds {count} chunks of bytes")
        return storage, slice(start + first, start + first + rows)

    def _read(self, rank: int, reader: int, buf: str, index: int, size: int, what: str, packets: bool = False,
              ) -> np.ndarray:
        storage, rows = self._slot(rank, buf, index, size, what, packets)
        state = self.ranks[rank]
        if not state.written[storage][rows].all():
            raise _Failure(UNWRITTEN_READ, f"{what} reads rank {rank} {buf}[{index}:{index + size}], which nothing "
                           "has written")
        if not packets:
            if state.packet[storage][rows].any():
                raise _Failure(RACE, f"{what} reads packets in rank {rank} {buf}[{index}:{index + size}] as plain "
                               "data; use upkt/repkt")
            for w, seq in zip(state.writer[storage][rows], state.writer_seq[storage][rows], strict=True):
                if w >= 0 and w != reader and self.clock[reader, w] <= seq:
                    raise _Failure(RACE, f"{what} reads rank {rank} {buf}[{index}:{index + size}] that rank {w} wrote "
                                   f"before rank {reader} waited for a signal rank {w} sent after the write")
        return state.storages[storage][rows][::2 if packets else 1].copy()

    def _write(self, rank: int, writer: int, buf: str, index: int, size: int, data: np.ndarray, what: str,
               packets: bool = False) -> None:
        storage, rows = self._slot(rank, buf, index, size, what, packets)
        state = self.ranks[rank]
        if packets:  # a chunk's packets fill two rows (data and flags); both hold the data here
            data = np.repeat(data, 2, axis=0)
        # Rewriting the very bytes a port put is reading cannot change what it delivers (MSCCL++'s multi-node
        # packet AllGather packs the same value into one temp slot once per peer); anything else is a race.
        same_bytes = (state.written[storage][rows].all() and bool((state.packet[storage][rows] == packets).all())
                      and np.array_equal(state.storages[storage][rows], data))
        if state.in_flight[storage][rows].any() and not same_bytes:
            raise _Failure(RACE, f"{what} overwrites rank {rank} {buf}[{index}:{index + size}] while a port put "
                           "still reads it; flush the port channel first")
        state.storages[storage][rows] = data
        state.written[storage][rows] = True
        state.packet[storage][rows] = packets
        state.writer[storage][rows] = writer
        state.writer_seq[storage][rows] = self.clock[writer, writer]

    def _signal(self, rank: int, kind: str, channel: int, relaxed: bool) -> None:
        """One signal to the partner channel; a non-relaxed one publishes everything `rank` knows."""
        peer = self.peers[rank][kind][channel]
        self.clock[rank, rank] += 1
        stamp = None if relaxed else self.clock[rank].copy()
        self.inbox.setdefault((peer, kind, self.partner[(rank, kind, channel)]), deque()).append(stamp)

    def _take_signal(self, rank: int, kind: str, channel: int, relaxed: bool) -> None:
        stamp = self.inbox[(rank, kind, channel)].popleft()
        if stamp is not None and not relaxed:
            np.maximum(self.clock[rank], stamp, out=self.clock[rank])

    def _start_dma(self, rank: int, channel: int, src: Mapping[str, Any], what: str, packets: bool = False) -> None:
        """A port put: the proxy reads `src` later, so it is in flight until a flush on the channel. The plan
        must flush before it ends, except for packets put from the scratch buffer: their receiver waits for
        the packets' flags, and a double-buffered scratch (LL plans) is not touched by the next run, so
        MSCCL++'s own packet programs end without a flush."""
        storage, rows = self._slot(rank, str(src["type"]), int(src["index"]), int(src["size"]), what, packets)
        self.ranks[rank].in_flight[storage][rows] = True
        if not (packets and src["type"] == "s"):
            self.unflushed[(rank, channel)] = self.unflushed.get((rank, channel), 0) + 1

    # --- running -------------------------------------------------------------------------------
    def run(self) -> int:
        tbs = [(r, t) for r, gpu in enumerate(self.gpus) for t in range(len(gpu["threadblocks"]))]
        pcs = dict.fromkeys(tbs, 0)
        ops_run = 0
        moved = True
        while moved:
            moved = False
            for rank, t in tbs:
                tb = self.gpus[rank]["threadblocks"][t]
                while pcs[(rank, t)] < len(tb["ops"]):
                    if not self._step(rank, tb, tb["ops"][pcs[(rank, t)]], f"gpu {rank} tb {t} op "
                                      f"{pcs[(rank, t)]}"):
                        break
                    pcs[(rank, t)] += 1
                    ops_run += 1
                    moved = True
        stuck = [(r, t) for r, t in tbs if pcs[(r, t)] < len(self.gpus[r]["threadblocks"][t]["ops"])]
        if stuck:
            lines = [f"gpu {r} tb {t} op {pcs[(r, t)]} ({self.gpus[r]['threadblocks'][t]['ops'][pcs[(r, t)]]['name']}) "
                     "waits for something no threadblock will ever do"
                     + self._overwritten_packets(r, self.gpus[r]["threadblocks"][t]["ops"][pcs[(r, t)]])
                     for r, t in stuck]
            raise _Failure(DEADLOCK, f"{len(stuck)} threadblock(s) can never finish; {lines[0]}", lines[:MAX_REPORTED])
        open_puts = [key for key, count in self.unflushed.items() if count]
        if open_puts:
            rank, channel = open_puts[0]
            raise _Failure(RACE, f"rank {rank} port channel {channel} ends with puts never flushed; add a flush")
        return ops_run

    def _overwritten_packets(self, rank: int, op: Mapping[str, Any]) -> str:
        """Why a packet read may never see its flags: plain data was written over the packets' bytes."""
        if op["name"] not in ("upkt", "rppkt", "repkt", "respkt", "recpkt", "recspkt"):
            return ""
        state = self.ranks[rank]
        for buff in op["src_buff"][0 if op["name"] in ("upkt", "rppkt") else 1:]:
            storage, rows = self._slot(rank, str(buff["type"]), int(buff["index"]), int(buff["size"]), "", True)
            if (state.written[storage][rows] & ~state.packet[storage][rows]).any():
                return (f"; plain data was written over the bytes of its packets {buff['type']}[{buff['index']}] "
                        "(a packet slot at index i starts at byte offset 2 * i * chunk)")
        return ""

    def _channels(self, tb: Mapping[str, Any], op: Mapping[str, Any]) -> tuple[str, list[int]]:
        kind = str(op.get("channel_type", "none"))
        local = [cid for entry in tb["channels"] if entry["channel_type"] == kind for cid in entry["channel_ids"]]
        return kind, [local[c] for c in op.get("channel_ids", [])]

    def _step(self, rank: int, tb: Mapping[str, Any], op: Mapping[str, Any], what: str) -> bool:
        name = op["name"]
        what = f"{what} ({name})"
        handler = HANDLERS.get(name)
        if handler is None:
            raise _Failure(UNSUPPORTED, f"{what}: the plan interpreter does not run {name!r} ops")
        try:
            kind, channels = self._channels(tb, op)
            return handler(self, rank, tb, op, kind, channels, what)
        except (KeyError, IndexError, TypeError, ValueError) as exc:  # a field the op needs is missing or wrong
            raise _Failure(LAYOUT, f"{what} is malformed ({type(exc).__name__}: {exc}); give it the src_buff, "
                           "dst_buff, channel and semaphore ids the executor reads for this op") from None

    def outputs(self) -> tuple[np.ndarray, ...]:
        result = []
        for state in self.ranks:
            storage, start, count = state.places["o"]
            result.append(state.storages[storage][start:start + count].reshape(-1))
        return tuple(result)

    def output_written(self) -> list[np.ndarray]:
        return [state.written[state.places["o"][0]][state.places["o"][1]:state.places["o"][1] + state.places["o"][2]]
                for state in self.ranks]


def checked_plan(plan: Mapping[str, Any], collective: Collective | None = None, nbytes: int | None = None,
                 ) -> ExecutionResult:
    """Run the plan through the schema check and the interpreter; raise ExecutionError (one line) unless it
    passes. Every plan collsynth writes goes through this first."""
    outcome = execute_plan(plan, nbytes=nbytes, collective=collective)
    if not outcome.passed:
        raise ExecutionError(f"plan {plan['name']!r} fails the plan interpreter: {outcome.failure}: {outcome.message}")
    return outcome
