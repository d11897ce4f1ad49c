"""The simulator's plan: an IR flattened for the event loop (`collsynth.sim.engine`), every lookup resolved to an
index, and the checks that the IR can run (size-independent: the tuner plans an IR once and times it at every
size)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from collsynth.core.steps import LOCAL_TYPES
from collsynth.ir import RECEIVING_TYPES, REDUCE, SENDING_TYPES, STEP_TYPES, Algo
from collsynth.sim import protocol
from collsynth.sim.nccl import SimError
from collsynth.topologies.model import Topology


class PlannedStep(NamedTuple):
    """One IR step with every lookup resolved to an index (size-independent). A NamedTuple: the event loop
    reads its fields once per step and tile, and a large IR has millions of them."""

    cnt: int
    dep_tb: int = -1  # global threadblock index of the dependency, -1 for none
    dep_step: int = -1  # position of the dependency step in that threadblock
    recv_conn: int = -1  # connection this step receives from, -1 for none
    send_conn: int = -1  # connection this step sends on, -1 for none
    link: int = -1  # link the send uses
    switches: tuple[int, ...] = ()  # switches whose budget the send shares
    alpha_us: float = 0.0  # alpha of the send's link
    beta_us_per_mb: float = 0.0  # effective beta of the send (link, or a slower switch)
    local: bool = False  # a standalone cpy / re
    reduces: bool = False  # a standalone re (its beta is the reduction's)


@dataclass(frozen=True)
class Plan:
    """The IR flattened for the event loop: global threadblocks 0..T-1 and their steps."""

    labels: tuple[tuple[int, int], ...]  # global tb index -> (rank, tb id)
    steps: tuple[tuple[PlannedStep, ...], ...]
    step_labels: tuple[tuple[int, ...], ...]  # the IR's `s` of each planned step (for messages)
    connections: tuple[tuple[int, int, int], ...]  # connection index -> (sender, receiver, channel)
    num_links: int
    switch_lanes: tuple[int, ...]  # lanes (bandwidth) per switch

    def __hash__(self) -> int:
        """The fields' hash, computed once: the tuner keys its simulations by plan (a hash walks every step).
        The fields hold only numbers, so the hash is the same in every process."""
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.labels, self.steps, self.step_labels, self.connections, self.num_links,
                           self.switch_lanes))
            object.__setattr__(self, "_hash", cached)
        return cached


class _Side(NamedTuple):
    """How plan()'s errors name one side of a connection."""

    name: str  # "send" / "receive"
    doing: str  # the steps that need it: "sending" / "receiving"
    peer: str  # the threadblock's peer attribute: "send" / "recv"


_SEND, _RECEIVE = _Side("send", "sending", "send"), _Side("receive", "receiving", "recv")


def plan(ir: Algo, topology: Topology) -> Plan:
    """Resolve peers to links, dependencies to indices, and check the IR can run (size-independent)."""
    protocol.check_protocol(ir.proto, f"IR {ir.name!r}")
    if ir.ngpus != topology.num_ranks:
        raise SimError(f"IR {ir.name!r} is for {ir.ngpus} GPUs but topology {topology.name!r} has "
                       f"{topology.num_ranks} ranks; pick a topology of the same size")
    labels: list[tuple[int, int]] = []
    index: dict[tuple[int, int], int] = {}
    positions: dict[tuple[int, int], dict[int, int]] = {}  # (rank, tb id) -> step `s` -> position
    for gpu in ir.gpus:
        if not 0 <= gpu.id < topology.num_ranks:
            raise SimError(f"IR {ir.name!r}: gpu id {gpu.id} is outside 0..{topology.num_ranks - 1}")
        for tb in gpu.tbs:
            if (gpu.id, tb.id) in index:
                raise SimError(f"IR {ir.name!r}: gpu {gpu.id} has two threadblocks with id {tb.id}")
            index[(gpu.id, tb.id)] = len(labels)
            labels.append((gpu.id, tb.id))
            positions[(gpu.id, tb.id)] = {step.s: i for i, step in enumerate(tb.steps)}

    link_ids = {(link.src, link.dst): i for i, link in enumerate(topology.link_list)}
    switches_of: dict[tuple[int, int], list[int]] = {}
    for i, switch in enumerate(topology.switches):
        for pair in switch.links:
            switches_of.setdefault(pair, []).append(i)

    connections: dict[tuple[int, int, int], int] = {}
    send_owner: dict[int, tuple[int, int]] = {}
    recv_owner: dict[int, tuple[int, int]] = {}
    sends: list[int] = []  # per connection: sending steps on it
    receives: list[int] = []

    def connection(key: tuple[int, int, int]) -> int:
        if key not in connections:
            connections[key] = len(connections)
            sends.append(0)
            receives.append(0)
        return connections[key]

    def own_side(where: str, side: _Side, peer: int, key: tuple[int, int, int],
                 owners: dict[int, tuple[int, int]], owner: tuple[int, int]) -> int:
        """The connection `key` (sender, receiver, channel) whose `side` threadblock `owner` is: its peer must be
        a rank, and no other threadblock may own that side."""
        if not 0 <= peer < topology.num_ranks:
            raise SimError(f"{where}: has {side.doing} steps but {side.peer} peer {peer}; "
                           f"set the tb's {side.peer} peer")
        conn = connection(key)
        if conn in owners:
            raise SimError(f"{where}: shares the {side.name} connection {key[0]}->{key[1]} channel {key[2]} with tb "
                           f"{owners[conn][1]}; give each threadblock its own (peer, channel)")
        owners[conn] = owner
        return conn

    new_step = tuple.__new__
    all_steps: list[tuple[PlannedStep, ...]] = []
    all_step_labels: list[tuple[int, ...]] = []
    for gpu in ir.gpus:
        for tb in gpu.tbs:
            where = f"IR {ir.name!r} gpu {gpu.id} tb {tb.id}"
            position = positions[(gpu.id, tb.id)]
            send_conn = recv_conn = -1
            if any(step.type in SENDING_TYPES for step in tb.steps):
                send_conn = own_side(where, _SEND, tb.send, (gpu.id, tb.send, tb.chan), send_owner, (gpu.id, tb.id))
            if any(step.type in RECEIVING_TYPES for step in tb.steps):
                recv_conn = own_side(where, _RECEIVE, tb.recv, (tb.recv, gpu.id, tb.chan), recv_owner, (gpu.id, tb.id))
            link, alpha, beta = -1, 0.0, 0.0
            switch_ids: tuple[int, ...] = ()
            if send_conn >= 0:
                pair = (gpu.id, tb.send)
                if pair not in link_ids:
                    raise SimError(f"{where}: sends {gpu.id}->{tb.send} but topology {topology.name!r} has no link "
                                   "between them; route through a neighbour or use a topology with that link")
                link = link_ids[pair]
                topo_link = topology.link_list[link]
                switch_ids = tuple(switches_of.get(pair, ()))
                alpha = topo_link.alpha_us
                beta = max([topo_link.beta_us_per_mb] + [topology.switches[i].beta_us_per_mb for i in switch_ids])
                if ir.proto != "Simple":  # Simple is the topology's own alpha-beta, bit for bit
                    alpha *= protocol.latency_scale(ir.proto, topo_link.kind)
                    beta *= protocol.beta_scale(ir.proto)
            planned = []
            for step in tb.steps:
                if step.type not in STEP_TYPES:
                    raise SimError(f"{where} step {step.s}: unknown step type {step.type!r}; "
                                   f"known: {' '.join(STEP_TYPES)}")
                if step.cnt < 0:
                    raise SimError(f"{where} step {step.s}: negative count {step.cnt}")
                dep_tb = dep_step = -1
                if step.depid >= 0:
                    if (gpu.id, step.depid) not in index:
                        raise SimError(f"{where} step {step.s}: depends on tb {step.depid}, which gpu {gpu.id} "
                                       "does not have")
                    dep_tb = index[(gpu.id, step.depid)]
                    dep_positions = positions[(gpu.id, step.depid)]
                    if step.deps not in dep_positions:
                        raise SimError(f"{where} step {step.s}: depends on step {step.deps} of tb {step.depid}, "
                                       "which does not exist")
                    dep_step = dep_positions[step.deps]
                    if dep_tb == index[(gpu.id, tb.id)] and dep_step >= position[step.s]:
                        raise SimError(f"{where} step {step.s}: depends on a later step of its own threadblock")
                sending = step.type in SENDING_TYPES
                receiving = step.type in RECEIVING_TYPES
                if sending:
                    sends[send_conn] += 1
                if receiving:
                    receives[recv_conn] += 1
                # tuple.__new__: PlannedStep's own __new__ is Python code, and a large IR has many steps
                if sending:
                    planned.append(new_step(PlannedStep, (step.cnt, dep_tb, dep_step, recv_conn if receiving else -1,
                                                          send_conn, link, switch_ids, alpha, beta, False, False)))
                else:
                    planned.append(new_step(PlannedStep, (step.cnt, dep_tb, dep_step, recv_conn if receiving else -1,
                                                          -1, -1, (), 0.0, 0.0, step.type in LOCAL_TYPES,
                                                          step.type == REDUCE)))
            all_steps.append(tuple(planned))
            all_step_labels.append(tuple(step.s for step in tb.steps))
    conn_list = sorted(connections, key=connections.__getitem__)
    for key, conn in connections.items():
        if sends[conn] != receives[conn]:
            raise SimError(f"IR {ir.name!r}: connection {key[0]}->{key[1]} channel {key[2]} carries {sends[conn]} "
                           f"sends but {receives[conn]} receives; every send needs exactly one matching receive")
    return Plan(labels=tuple(labels), steps=tuple(all_steps), step_labels=tuple(all_step_labels),
                connections=tuple(conn_list), num_links=len(topology.link_list),
                switch_lanes=tuple(max(1, switch.bandwidth) for switch in topology.switches))
