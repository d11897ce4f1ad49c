"""Property: `schedule` (CSR successor arrays, a lexsorted integer priority) gives exactly the order of the plain
list scheduler it replaced (a ready set keyed by (depth, -rdepth, instr)), on the DAGs of random DSL programs
and of library programs; and that order is topological."""

import heapq

import pytest
from hypothesis import given, settings
from test_compiler_property import random_programs

from collsynth.algorithms.registry import library_programs
from collsynth.compiler import assign_channels, depths, schedule, trace_to_dag
from collsynth.compiler.merging import fuse_instructions
from collsynth.compiler.ordering import order_messages
from collsynth.topologies import resolve_topology


def reference_order(dag):
    """The list scheduler written plainly: an instr is ready when its dependencies, the message queued before
    it and its sender are done; the ready instr with the least (depth, -rdepth, instr) runs next."""
    n = len(dag.instrs)
    depth, rdepth = depths(dag)
    succs = [[] for _ in range(n)]
    pending = [0] * n
    for i in range(n):
        for p in (*dag.preds[i], *dag.after[i]):
            succs[p].append(i)
            pending[i] += 1
        if dag.send_to[i] >= 0:
            succs[i].append(dag.send_to[i])
            pending[dag.send_to[i]] += 1
    ready = [(depth[i], -rdepth[i], i) for i in range(n) if pending[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)[2]
        order.append(i)
        for s in succs[i]:
            pending[s] -= 1
            if pending[s] == 0:
                heapq.heappush(ready, (depth[s], -rdepth[s], s))
    return order


def check(dag):
    order = list(schedule(assign_channels(dag)).order)
    assert order == reference_order(dag)
    position = {i: k for k, i in enumerate(order)}
    for i in range(len(dag.instrs)):
        assert all(position[p] < position[i] for p in (*dag.preds[i], *dag.after[i]))
        if dag.send_to[i] >= 0:
            assert position[i] < position[dag.send_to[i]]


@settings(max_examples=60, deadline=None)
@given(random_programs())
def test_schedule_matches_the_plain_list_scheduler(case):
    program = case[0]
    dag = trace_to_dag(program)
    check(dag)
    check(fuse_instructions(order_messages(dag)))


@pytest.mark.parametrize("topology, collective", [("ring:8", "allreduce"), ("dgx1", "allgather"),
                                                  ("fully_connected:8", "alltoall"), ("ring:8", "reducescatter")])
def test_schedule_matches_on_library_programs(topology, collective):
    programs = library_programs(resolve_topology(topology), collective)
    assert programs
    for _, program in programs:
        check(fuse_instructions(order_messages(trace_to_dag(program))))
