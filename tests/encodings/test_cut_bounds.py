"""Cut bounds: closed forms on small shapes, and never above a schedule that exists."""

from __future__ import annotations

import pytest

from collsynth.collectives import make_collective
from collsynth.encodings.cut_bounds import MIB, cut_bound_us, ingress_bound_us
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import builtin
from collsynth.topologies.cluster import relinked


def test_mesh_corner_is_the_binding_cut() -> None:
    topo = relinked(builtin("mesh2d:4x4"), 0.5, 50.0)
    size = 16 * MIB  # one MiB per chunk
    bound = cut_bound_us(topo, make_collective("allgather", 16), size)
    # a corner has 2 in-links of 50 GB/s (20 us/MB) and lacks 15 chunks of 1 MiB
    assert bound.time_us == pytest.approx(0.5 + 15 * 20 / 2)
    assert len(bound.ranks) == 1 and bound.ranks[0] in (0, 3, 12, 15)


def test_reducescatter_bound_is_allgather_bound_on_symmetric_links() -> None:
    topo = builtin("torus:4x4")
    ag = cut_bound_us(topo, make_collective("allgather", 16), 1 << 26)
    rs = cut_bound_us(topo, make_collective("reducescatter", 16), 1 << 26)
    assert rs.time_us == pytest.approx(ag.time_us)
    assert ingress_bound_us(topo, make_collective("allreduce", 16), 1 << 26).time_us > 0


@pytest.mark.parametrize("topology", ["ring:6", "torus:3x3", "2xndv2", "hypercube:3", "fattree:4"])
@pytest.mark.parametrize("name", ["allgather", "reducescatter", "alltoall"])
def test_bound_never_exceeds_a_real_schedule(topology: str, name: str) -> None:
    topo = builtin(topology)
    coll = make_collective(name, topo.num_ranks)
    schedule = greedy(topo, coll, 1 << 26).algorithm
    assert schedule is not None
    assert cut_bound_us(topo, coll, 1 << 26).time_us <= schedule.provenance["makespan_us"] + 1e-6


def test_multi_node_bound_uses_the_nics() -> None:
    topo = builtin("2xndv2")  # one EDR NIC per node: 8 chunks must cross it each way
    bound = cut_bound_us(topo, make_collective("allgather", 16), 16 * MIB)
    assert bound.kind == "node"
    assert bound.time_us >= 8 * 105.0
