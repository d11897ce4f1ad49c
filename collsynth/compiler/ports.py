"""order_port_sends: a timed schedule's sends through one port go in the schedule's order.

A MILP (or time-expanded) schedule times every send; transfers that share a switch port (an NVSwitch port, a
NIC) or a link run one after another in the order the solver chose. Left to themselves, the runtime (and
the simulator) start whichever is ready first, which can hold a port for a transfer whose receiving port is
still busy while another could have gone. This pass makes each send of a rank wait for the previous send of
that rank through the same port or link (program order: the lowering emits a timed schedule's sends in
start order), so the ports see the schedule's order. Pure: a new DAG with extra same-rank dependencies.
"""

from __future__ import annotations

from collsynth.compiler.dag import InstrDAG
from collsynth.ir import SENDING_TYPES
from collsynth.topologies import Topology


def order_port_sends(dag: InstrDAG, topology: Topology) -> InstrDAG:
    """Every send waits for the rank's previous send through any port (switch) or link it shares."""
    ports: dict[tuple[int, int], list[tuple[str, int]]] = {}
    for k, switch in enumerate(topology.switches):
        for link in switch.links:
            ports.setdefault(link, []).append(("switch", k))
    last: dict[tuple[int, str, int], int] = {}
    instrs = list(dag.instrs)
    changed = False
    for i, ins in enumerate(dag.instrs):
        if ins.kind not in SENDING_TYPES:
            continue
        link = (ins.rank, ins.send_peer)
        keys = [(ins.rank, kind, k) for kind, k in ports.get(link, [])] + [(ins.rank, "link", ins.send_peer)]
        before = {last[key] for key in keys if key in last}
        if before - set(ins.preds):
            instrs[i] = ins._replace(preds=tuple(sorted(set(ins.preds) | before)))
            changed = True
        for key in keys:
            last[key] = i
    if not changed:
        return dag
    return InstrDAG(dag.num_ranks, tuple(instrs), dag.source)
