"""Cut bounds: closed forms on small shapes, and never above a schedule that exists."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.encodings.cut_bounds import MIB, cut_bound_us, ingress_bound_us, set_bound_us
from collsynth.synth.cluster.greedy import greedy
from collsynth.topologies import Topology, builtin
from collsynth.topologies.cluster import relinked
from collsynth.topologies.model import Link


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


def test_alltoall_is_bounded_by_the_bisection_of_a_hypercube() -> None:
    topo = relinked(builtin("hypercube:4"), 0.5, 50.0)
    size = 16 * MIB  # AllToAll: 16 chunks per rank of 1 MiB
    bound = cut_bound_us(topo, make_collective("alltoall", 16), size)
    # ranks 0..7 are a subcube: 8 * 8 chunks must enter it over its 8 in-links (20 us/MB each)
    assert bound.kind == "half"
    assert bound.time_us == pytest.approx(0.5 + 64 * 20 / 8)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), name=st.sampled_from(["allgather", "alltoall", "gather", "broadcast", "scatter"]))
def test_set_bound_counts_the_chunks_that_must_enter(seed: int, name: str) -> None:
    """The (chunk, rank) pair tables against the definition: chunks wanted in S and held by none of S."""
    rng = random.Random(seed)
    n = rng.randint(2, 7)
    links = tuple(Link(u, v, beta_us_per_mb=rng.choice((10.0, 20.0))) for u in range(n) for v in range(n)
                  if u != v and (v == (u + 1) % n or rng.random() < 0.4))
    topo = Topology(f"random{seed}", n, links)
    coll = make_collective(name, n, rng.randint(1, 2), root=rng.randrange(n) if name in ("gather", "broadcast",
                                                                                       "scatter") else None)
    members = tuple(sorted(rng.sample(range(n), rng.randint(1, n - 1))))
    inside = set(members)
    need = sum(1 for pre, post in zip(coll.pre, coll.post, strict=True) if post & inside and not pre & inside)
    rate = sum(1 / x.beta_us_per_mb for x in links if x.dst in inside and x.src not in inside)
    chunk_mb = 1.0
    size = int(chunk_mb * MIB * max(coll.input_chunks, coll.output_chunks))
    expected = 0.0 if need == 0 else min(x.alpha_us for x in links) + need * chunk_mb / rate
    assert set_bound_us(topo, coll, size, members).time_us == pytest.approx(expected)
