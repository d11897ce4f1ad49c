"""Timing of MSCCL++ execution plans under the simulator's own alpha-beta model (collsynth.sim).

Every figure comes from the tables the MSCCL-IR simulator uses: the topology's per-link alpha/beta and switch
budgets, the protocol tables of collsynth.sim.protocol (NCCL tuning.cc per-hop latencies and line
efficiencies) and the local-step constants of collsynth.sim.simulate. How each primitive is costed, and why:

* memory-channel `put` (m MB): the threads store straight into the peer's registered buffer. There is no
  FIFO credit to wait for and no copy out of a connection buffer at the receiver, so the hop's latency is
  that of plain flagless stores: the link's alpha scaled by the LL / Simple per-hop latency ratio of its
  hardware class (NCCL's LL latency is exactly a store-and-poll hop without the Simple protocol's
  handshake); bandwidth is the full link beta (whole-width stores). It holds the link and the switch lanes
  as the MSCCL-IR simulator's transfers do, and keeps the threadblock busy until it has landed;
* `signal`: one flag store after a fence, arriving alpha x (LL ratio) after the data; `wait` blocks until
  the matching signal has arrived (the k-th wait takes the k-th signal of its channel);
* port-channel `put`: a DMA the proxy runs; the threadblock only pushes a request (a local step's alpha)
  and goes on; the transfer holds the link like any other; `flush` waits until the channel's DMAs are done;
  over a port channel the signal follows the data through the same proxy;
* `ppkt` (LL packets): an LL hop (the LL latency ratio and the LL line efficiency 8/16 of beta); `upkt`
  and `repkt` wait until the packets have landed, then cost a local step;
* `copy` / `re`: the local step of the MSCCL-IR simulator (LOCAL_ALPHA_US + m x LOCAL_BETA_US_PER_MB);
* `glres` (NVLink SHARP, m MB over group G): a multimem load-reduce (every member's port sends m to the
  switch, the initiator's port receives the reduced m) then a multimem store (the initiator's port sends m,
  every member's port receives it); each phase holds the ports' lanes for alpha + m x beta of the port;
* `sem_acquire` waits for the matching `sem_release`; `nop` costs nothing; `rlxsignal`/`rlxwait` as
  signal/wait; `cpkt` as a local step. Any other op (get, res, rre, rres, rppkt, respkt, recpkt, recspkt,
  gstore, barrier) is a one-line SimError: the interpreter runs them, this model does not cost them yet.
A plan is one pass over the buffer (no tile loop); a chunk is (per-rank buffer) / (larger chunk count).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from collsynth.collectives.spec import canonical_name
from collsynth.sim.nccl import SimError, busbw_factor, dtype_info, nccl_size
from collsynth.sim.protocol import EFFICIENCY, latency_scale
from collsynth.sim.simulate import LOCAL_ALPHA_US, LOCAL_BETA_US_PER_MB, MB, SimModel, SimResult, SimRow
from collsynth.topologies.model import Topology


def simulate_plan(plan: Mapping[str, Any], topology: Topology, sizes: Iterable[int], *,
                  dtype: str = "float32") -> SimResult:
    """nccl-tests style timings of an execution plan on `topology` for each requested size (bytes)."""
    type_name, elem_bytes = dtype_info(dtype)
    ngpus = len(plan["gpus"])
    if topology.num_ranks != ngpus:
        raise SimError(f"plan {plan['name']!r} has {ngpus} ranks but {topology.name} has {topology.num_ranks}")
    chunks = max(max(g["input_chunks"], g["output_chunks"]) for g in plan["gpus"])
    factor = busbw_factor(plan["collective"], ngpus)
    rows = []
    for requested in sizes:
        nccl = nccl_size(plan["collective"], ngpus, int(requested), elem_bytes)
        time_us = plan_time_us(plan, topology, nccl.size_bytes / chunks / MB)
        algbw = nccl.size_bytes / 1e9 / (time_us * 1e-6) if time_us > 0 else 0.0
        rows.append(SimRow(nccl.size_bytes, nccl.count, type_name, time_us, algbw, algbw * factor))
    return SimResult(algorithm=str(plan["name"]), collective=canonical_name(str(plan["collective"])), ngpus=ngpus,
                     topology=topology.name, dtype=type_name, rows=tuple(rows), tiles=(1,) * len(rows),
                     extrapolated=(False,) * len(rows), model=SimModel())


def plan_time_us(plan: Mapping[str, Any], topology: Topology, chunk_mb: float) -> float:
    """Makespan of one run of the plan with chunks of `chunk_mb` MB."""
    return _PlanTimer(plan, topology, chunk_mb).run()


class _PlanTimer:
    def __init__(self, plan: Mapping[str, Any], topology: Topology, chunk_mb: float) -> None:
        self.plan, self.topology, self.chunk_mb = plan, topology, chunk_mb
        self.gpus = plan["gpus"]
        self.link_free: dict[tuple[int, int], float] = defaultdict(float)
        self.lane_free = {sw.name: [0.0] * sw.bandwidth for sw in topology.switches}
        self.switches_of: dict[tuple[int, int], list[Any]] = defaultdict(list)
        for sw in topology.switches:
            for link in sw.links:
                self.switches_of[link].append(sw)
        self.peers = [{kind: [p for ch in g["channels"] if ch["channel_type"] == kind for p in ch["connected_to"]]
                       for kind in ("memory", "port")} for g in self.gpus]
        self.signals: dict[tuple[int, int, str, int], list[float]] = defaultdict(list)  # (src, dst, kind, k)
        self.waits: dict[tuple[int, int, str, int], int] = defaultdict(int)
        self.port_done: dict[tuple[int, int], float] = defaultdict(float)
        self.landed: dict[tuple[int, str, int], float] = {}  # (rank, buffer, chunk) -> packet/data arrival
        self.releases: dict[tuple[int, int], list[float]] = defaultdict(list)
        self.acquired: dict[tuple[int, int], int] = defaultdict(int)

    # --- resources ---------------------------------------------------------------------------
    def _transfer(self, src: int, dst: int, mb: float, ready: float, proto: str) -> float:
        link = self.topology.link_between(src, dst)
        if link is None:
            raise SimError(f"plan {self.plan['name']!r} moves data {src} -> {dst} but {self.topology.name} has "
                           "no such link")
        switches = self.switches_of[(src, dst)]
        beta = max([link.beta_us_per_mb] + [sw.beta_us_per_mb for sw in switches]) / EFFICIENCY[proto]
        duration = link.alpha_us * latency_scale("LL", link.kind) + mb * beta
        start = max([ready, self.link_free[(src, dst)]] + [min(self.lane_free[sw.name]) for sw in switches])
        end = start + duration
        self.link_free[(src, dst)] = end
        for sw in switches:
            lanes = self.lane_free[sw.name]
            lanes[lanes.index(min(lanes))] = end
        return end

    def _port_lanes(self, rank: int, direction: str) -> list[str]:
        links = [(rank, o) for o in range(self.topology.num_ranks) if o != rank] if direction == "out" else \
            [(o, rank) for o in range(self.topology.num_ranks) if o != rank]
        return [sw.name for sw in self.topology.switches if set(links) <= set(sw.links)]

    def _hold(self, lanes: list[str], ready: float, duration: float) -> float:
        start = max([ready] + [min(self.lane_free[name]) for name in lanes])
        for name in lanes:
            free = self.lane_free[name]
            free[free.index(min(free))] = start + duration
        return start + duration

    # --- running -------------------------------------------------------------------------------
    def run(self) -> float:
        tbs = [(r, t) for r, g in enumerate(self.gpus) for t in range(len(g["threadblocks"]))]
        clock = dict.fromkeys(tbs, 0.0)
        pcs = dict.fromkeys(tbs, 0)
        while True:
            live = [k for k in tbs if pcs[k] < len(self.gpus[k[0]]["threadblocks"][k[1]]["ops"])]
            if not live:
                return max(clock.values(), default=0.0)
            progressed = False
            for key in sorted(live, key=lambda k: clock[k]):  # earliest threadblock first: first come first served
                rank, t = key
                tb = self.gpus[rank]["threadblocks"][t]
                done = self._op(rank, tb, tb["ops"][pcs[key]], clock[key])
                if done is not None:
                    clock[key], pcs[key] = done, pcs[key] + 1
                    progressed = True
                    break
            if not progressed:
                raise SimError(f"plan {self.plan['name']!r} deadlocks; run it with `collsynth run` for details")

    def _channels(self, tb: Mapping[str, Any], op: Mapping[str, Any]) -> tuple[str, list[int]]:
        kind = op.get("channel_type", "none")
        local = [c for e in tb["channels"] if e["channel_type"] == kind for c in e["channel_ids"]]
        return kind, [local[c] for c in op.get("channel_ids", [])]

    def _op(self, rank: int, tb: Mapping[str, Any], op: Mapping[str, Any], now: float) -> float | None:
        """The time the threadblock is done with `op`, or None if it must wait."""
        name = op["name"]
        kind, channels = self._channels(tb, op)
        size = max((b["size"] for b in op.get("src_buff", []) + op.get("dst_buff", [])), default=0)
        mb = size * self.chunk_mb
        if name in ("put", "ppkt"):
            return self._put(rank, kind, channels, op, mb, now, "LL" if name == "ppkt" else "Simple")
        if name in ("pws", "pwsf"):  # put with signal (and flush): one proxy request, as the three ops
            done = self._signal(rank, kind, channels, self._put(rank, kind, channels, op, mb, now, "Simple"))
            return self._flush(rank, channels, done) if name == "pwsf" else done
        if name in ("signal", "rlxsignal"):  # a relaxed signal skips a fence the model does not cost
            return self._signal(rank, kind, channels, now)
        if name in ("wait", "rlxwait"):
            arrivals = []
            for ch in channels:
                peer = self.peers[rank][kind][ch]
                key = (peer, rank, kind, self.peers[rank][kind][:ch].count(peer))
                if len(self.signals[key]) <= self.waits[key]:
                    return None
                arrivals.append(self.signals[key][self.waits[key]])
            for ch in channels:
                peer = self.peers[rank][kind][ch]
                self.waits[(peer, rank, kind, self.peers[rank][kind][:ch].count(peer))] += 1
            return max([now] + arrivals)
        if name == "flush":
            return self._flush(rank, channels, now)
        if name in ("copy", "re", "upkt", "repkt", "cpkt"):
            ready = now
            if name in ("upkt", "repkt"):
                for b in op["src_buff"]:
                    if b.get("type") == "s":
                        arrival = [self.landed.get((rank, "s", b["index"] + k)) for k in range(b["size"])]
                        if any(a is None for a in arrival):
                            return None
                        ready = max([ready] + [a for a in arrival if a is not None])
            return ready + LOCAL_ALPHA_US + mb * LOCAL_BETA_US_PER_MB
        if name == "glres":
            return self._glres(rank, tb, op, mb, now)
        if name == "sem_release":
            for sid in op["semaphore_ids"]:
                self.releases[(rank, sid)].append(now)
            return now
        if name == "sem_acquire":
            times = []
            for sid in op["semaphore_ids"]:
                if len(self.releases[(rank, sid)]) <= self.acquired[(rank, sid)]:
                    return None
                times.append(self.releases[(rank, sid)][self.acquired[(rank, sid)]])
            for sid in op["semaphore_ids"]:
                self.acquired[(rank, sid)] += 1
            return max([now] + times)
        if name == "nop":
            return now
        raise SimError(f"plan {self.plan['name']!r}: collsynth.sim.mscclpp does not time {name!r} ops (it times "
                       "what collsynth emits: put, pws, pwsf, ppkt, signal, wait, flush, copy, re, cpkt, upkt, repkt, "
                       "glres, sem_acquire, sem_release, nop); time the plan on the GPU instead")

    def _signal(self, rank: int, kind: str, channels: list[int], now: float) -> float:
        for ch in channels:
            peer = self.peers[rank][kind][ch]
            link = self.topology.link_between(rank, peer)
            hop = link.alpha_us * latency_scale("LL", link.kind) if link else 0.0
            after = max(now, self.port_done[(rank, ch)]) if kind == "port" else now
            ordinal = self.peers[rank][kind][:ch].count(peer)
            self.signals[(rank, peer, kind, ordinal)].append(after + hop)
        return now

    def _flush(self, rank: int, channels: list[int], now: float) -> float:
        return max([now] + [self.port_done[(rank, ch)] for ch in channels])

    def _put(self, rank: int, kind: str, channels: list[int], op: Mapping[str, Any], mb: float, now: float,
             proto: str) -> float:
        finish = now
        for ch, dst in zip(channels, op["dst_buff"], strict=False):
            peer = self.peers[rank][kind][ch]
            if kind == "port":
                issued = now + LOCAL_ALPHA_US
                end = self._transfer(rank, peer, mb, max(issued, self.port_done[(rank, ch)]), proto)
                self.port_done[(rank, ch)] = end
                finish = max(finish, issued)
            else:
                end = self._transfer(rank, peer, mb, now, proto)
                finish = max(finish, end)
            if proto == "LL":
                for k in range(dst["size"]):
                    self.landed[(peer, "s", dst["index"] + k)] = end
        return finish

    def _glres(self, rank: int, tb: Mapping[str, Any], op: Mapping[str, Any], mb: float, now: float) -> float:
        group = sorted({r for g in self.gpus[rank]["channels"] if g["channel_type"] == "switch"
                        for grp in g["rank_groups"] for r in grp["ranks"]})  # an out-of-place plan lists it twice
        peer = next(p for p in range(self.topology.num_ranks) if p != rank)
        link = self.topology.link_between(rank, peer)
        if link is None:
            raise SimError(f"{self.topology.name}: rank {rank} has no switch port")
        duration = link.alpha_us + mb * link.beta_us_per_mb
        gather = [name for g in group for name in self._port_lanes(g, "out")] + self._port_lanes(rank, "in")
        reduced = self._hold(gather, now, duration)  # multimem ld_reduce
        scatter = self._port_lanes(rank, "out") + [name for g in group for name in self._port_lanes(g, "in")]
        return self._hold(scatter, reduced, duration)  # multimem st
