"""Hierarchical AllReduce: verified on identical nodes with one NIC per GPU; refused where rails share NICs."""

from __future__ import annotations

import pytest

from collsynth.collectives import make_collective
from collsynth.schedule import verify
from collsynth.synth.cluster.hierarchical import hierarchical
from collsynth.synth.cluster.timexp import GreedyError
from collsynth.topologies import builtin


@pytest.mark.parametrize("chunks", [1, 2])
def test_two_ndv4_nodes(chunks: int) -> None:
    topo = builtin("2xndv4")
    result = hierarchical(topo, make_collective("allreduce", 16, chunks), 1 << 24)
    algorithm = result.algorithm
    assert algorithm is not None
    verify(algorithm)
    # only the rail phase crosses nodes, and each GPU talks to its own rail only
    for _, send in algorithm.sends():
        if topo.node_of(send.src) != topo.node_of(send.dst):
            assert send.src % 8 == send.dst % 8


def test_shared_nics_and_one_node_are_refused() -> None:
    with pytest.raises(GreedyError, match="share NICs"):
        hierarchical(builtin("2xndv2"), make_collective("allreduce", 16))
    with pytest.raises(GreedyError, match="one node"):
        hierarchical(builtin("ndv4"), make_collective("allreduce", 8))
    with pytest.raises(GreedyError, match="AllReduce only"):
        hierarchical(builtin("2xndv4"), make_collective("allgather", 16))
