"""MSCCLang-style programs (our own) that walk the topology with MSCCLang's Topology methods (num_nodes(),
nodes(), link(), sources(), destinations(), reverse_topology) and run unchanged after changing only their imports,
checked on the interpreter (MSCCLProgram) or the plan interpreter (MSCCLPPProgram)."""

from __future__ import annotations

from collections import deque

import pytest

from collsynth.language import XML, Buffer, Check, MSCCLPPProgram, MSCCLProgram, chunk
from collsynth.language.collectives import AllGather, AllReduce
from collsynth.topologies import (
    Topology,
    dgx1,
    distributed,
    fully_connected,
    hub_and_spoke,
    line,
    reverse_topology,
    ring,
    star,
)


def bfs_allgather(topo) -> None:
    """Each rank's chunk floods the topology along a BFS tree over topo.destinations, hop by hop."""
    for root in topo.nodes():
        seen, queue = {root}, deque([(root, chunk(root, Buffer.input, 0).copy(root, Buffer.output, root))])
        while queue:
            here, ref = queue.popleft()
            for nxt in topo.destinations(here):
                assert topo.link(here, nxt) > 0
                if nxt not in seen:
                    seen.add(nxt)
                    queue.append((nxt, ref.copy(nxt, Buffer.output, root)))


@pytest.mark.parametrize("make", [lambda: ring(5), lambda: line(4), dgx1, lambda: star(5),
                                  lambda: hub_and_spoke(4),
                                  lambda: distributed.distributed_fully_connected(ring(3), 2, 1),
                                  lambda: Topology("custom", [[0, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [1, 0, 0, 0]])])
def test_bfs_allgather_over_destinations(make, capsys: pytest.CaptureFixture[str]) -> None:
    topo = make()
    n = topo.num_nodes()
    with MSCCLProgram("bfs_allgather", topo, AllGather(n, 1, False), 1):
        bfs_allgather(topo)
        assert Check()
        XML()
    assert "<algo" in capsys.readouterr().out


def tree_allreduce(topo) -> None:
    """Reduce into rank 0 along a BFS tree built from topo.sources (children send up), then broadcast back down
    along topo.destinations; every hop checks topo.link like MSCCLang's own copy()."""
    parent, order, queue = {0: None}, [0], deque([0])
    while queue:
        here = queue.popleft()
        for child in topo.sources(here):  # ranks that can send to `here`
            if child not in parent and topo.link(here, child):
                parent[child] = here
                order.append(child)
                queue.append(child)
    assert sorted(order) == list(topo.nodes())
    for rank in reversed(order[1:]):  # leaves first: each child's partial sum goes to its parent
        chunk(parent[rank], Buffer.input, 0).reduce(chunk(rank, Buffer.input, 0))
    for rank in order[1:]:  # the total flows back down
        chunk(parent[rank], Buffer.input, 0).copy(rank, Buffer.input, 0)


@pytest.mark.parametrize("make", [lambda: ring(6), dgx1, lambda: star(4), lambda: reverse_topology(line(5))])
def test_tree_allreduce_over_sources(make) -> None:
    topo = make()
    n = topo.num_nodes()
    with MSCCLProgram("tree_allreduce", topo, AllReduce(n, 1, True), 1):
        tree_allreduce(topo)
        assert Check()


def test_mscclpp_neighbour_exchange_uses_link_and_destinations() -> None:
    """MSCCL++ AllGather on a fully connected topology: put + signal to every destination, wait on every source."""
    topo = fully_connected(4)
    n = topo.num_nodes()
    with MSCCLPPProgram("pp_allgather", topo, AllGather(n, 1, False), 1):
        for r in topo.nodes():
            mine = chunk(r, Buffer.input, 0)
            mine.copy(r, Buffer.output, r, sendtb=0)
            for peer in topo.destinations(r):
                assert topo.link(r, peer) == 1
                mine.put(peer, Buffer.output, r, sendtb=peer)
                mine.signal(peer, Buffer.output, r, sendtb=peer)
        for r in topo.nodes():
            for peer in topo.sources(r):
                chunk(r, Buffer.output, peer).wait(peer, Buffer.input, 0, recvtb=r)
        assert Check()
