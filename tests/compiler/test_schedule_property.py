"""Property: `schedule` (CSR successor arrays, a scan of the priority order with a heap for the instrs it passed)
gives exactly the order of the plain list scheduler it replaced (a ready set keyed by (depth, -rdepth, instr),
sends parked while their connection holds `slots` messages), on the DAGs of random DSL programs and of library
programs, with 1, 2, 8 and unbounded slots; and that order is topological."""

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_compiler_property import random_programs

from collsynth.algorithms.registry import library_programs
from collsynth.compiler import assign_channels, depths, schedule, trace_to_dag
from collsynth.compiler.merging import fuse_instructions
from collsynth.compiler.ordering import order_messages
from collsynth.core.limits import FIFO_SLOTS
from collsynth.ir import RECEIVING_TYPES, SENDING_TYPES
from collsynth.topologies import resolve_topology


def reference_order(channelled, slots=None):
    """The list scheduler written plainly: an instr is ready when its dependencies, the message queued before
    it and its sender are done; the ready instr with the least (depth, -rdepth, instr) runs next. With `slots`,
    a send whose connection holds that many messages waits (parked) until a receive on it frees one; when only
    parked sends are left, the best of them goes anyway."""
    dag = channelled.dag
    n = len(dag.instrs)
    sends = [(ins.rank, ins.send_peer, ch) if slots and ins.kind in SENDING_TYPES else None
             for ins, ch in zip(dag.instrs, channelled.channel, strict=True)]
    recvs = [(ins.recv_peer, ins.rank, ch) if slots and ins.kind in RECEIVING_TYPES else None
             for ins, ch in zip(dag.instrs, channelled.channel, strict=True)]
    in_flight, parked = {}, {}
    depth, rdepth = depths(dag)
    succs = [[] for _ in range(n)]
    pending = [0] * n
    for i, ins in enumerate(dag.instrs):
        for p in (*ins.preds, *ins.after):
            succs[p].append(i)
            pending[i] += 1
        if ins.send_to >= 0:
            succs[i].append(ins.send_to)
            pending[ins.send_to] += 1
    ready = [(depth[i], -rdepth[i], i) for i in range(n) if pending[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready or parked:
        if ready:
            key = heapq.heappop(ready)
            if sends[key[2]] is not None and in_flight.get(sends[key[2]], 0) >= slots:
                parked.setdefault(sends[key[2]], []).append(key)
                continue
        else:
            conn = min(parked, key=lambda c: min(parked[c]))
            key = min(parked[conn])
            parked[conn].remove(key)
            if not parked[conn]:
                del parked[conn]
        i = key[2]
        order.append(i)
        if recvs[i] is not None:
            in_flight[recvs[i]] -= 1
            if parked.get(recvs[i]):
                best = min(parked[recvs[i]])
                parked[recvs[i]].remove(best)
                heapq.heappush(ready, best)
                if not parked[recvs[i]]:
                    del parked[recvs[i]]
        if sends[i] is not None:
            in_flight[sends[i]] = in_flight.get(sends[i], 0) + 1
        for s in succs[i]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(ready, (depth[s], -rdepth[s], s))
    return order


def check(dag, slots=None):
    channelled = assign_channels(dag)
    order = list(schedule(channelled, slots).order)
    assert order == reference_order(channelled, slots)
    position = {i: k for k, i in enumerate(order)}
    for i, ins in enumerate(dag.instrs):
        assert all(position[p] < position[i] for p in (*ins.preds, *ins.after))
        if ins.send_to >= 0:
            assert position[i] < position[ins.send_to]


@settings(max_examples=60, deadline=None)
@given(random_programs(), st.sampled_from([None, 1, 2, FIFO_SLOTS]))
def test_schedule_matches_the_plain_list_scheduler(case, slots):
    program = case[0]
    dag = trace_to_dag(program)
    check(dag, slots)
    check(fuse_instructions(order_messages(dag)), slots)


@pytest.mark.parametrize("topology, collective", [("ring:8", "allreduce"), ("dgx1", "allgather"),
                                                  ("fully_connected:8", "alltoall"), ("ring:8", "reducescatter")])
def test_schedule_matches_on_library_programs(topology, collective):
    programs = library_programs(resolve_topology(topology), collective)
    assert programs
    for _, program in programs:
        for slots in (None, 1, FIFO_SLOTS):
            check(fuse_instructions(order_messages(trace_to_dag(program))), slots)
