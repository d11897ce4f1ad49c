"""The per-destination greedy for one-destination collectives: verified schedules on random topologies, every
transfer one hop closer (so each chunk takes exactly dist(src, dst) transfers), and `greedy` using it past
the dense engine's cell limit."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.schedule import COPY, Algorithm, verify
from collsynth.synth.cluster import greedy as greedy_module
from collsynth.synth.cluster.greedy import _steps, greedy
from collsynth.synth.cluster.timexp import GreedyError, link_arrays
from collsynth.synth.cluster.unicast import chunk_ends, one_destination_ends, run_unicast
from collsynth.topologies import Topology, builtin
from collsynth.topologies.model import Link, Switch


def _random_topology(seed: int, n: int) -> Topology:
    rng = random.Random(seed)
    pairs = {(u, (u + 1) % n) for u in range(n)}
    pairs |= {(u, v) for u in range(n) for v in range(n) if u != v and rng.random() < 0.3}
    links = tuple(Link(u, v, beta_us_per_mb=rng.choice((10.0, 20.0))) for u, v in sorted(pairs))
    switches = ()
    if rng.random() < 0.4:  # one port budget on rank 0's out-links
        switches = (Switch("port0", frozenset(p for p in pairs if p[0] == 0), 1, 10.0),)
    return Topology(f"random{seed}", n, links, switches)


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 8), name=st.sampled_from(["alltoall", "gather", "scatter"]),
       chunks=st.integers(1, 2))
def test_unicast_schedules_verify_and_move_closer(seed: int, n: int, name: str, chunks: int) -> None:
    topo = _random_topology(seed, n)
    coll = make_collective(name, n, chunks, root=seed % n if name != "alltoall" else None)
    transfers = run_unicast(topo, coll, link_arrays(topo, 1.0), seed=seed)
    verify(Algorithm("u", topo, coll, _steps(transfers, COPY), {}))
    dist = np.array(topo.distances)
    src, dst = chunk_ends(coll)
    ends = dst[transfers.chunk]
    assert (dist[transfers.dst, ends] == dist[transfers.src, ends] - 1).all()
    assert len(transfers.chunk) == int(dist[src, dst].sum())


def test_greedy_uses_unicast_past_the_dense_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    topo = builtin("torus:4x4")
    coll = make_collective("alltoall", 16)
    monkeypatch.setattr(greedy_module, "MAX_CELLS", 10)
    result = greedy(topo, coll, 1 << 24)
    assert result.algorithm is not None
    expected = run_unicast(topo, coll, link_arrays(topo, greedy_module.chunk_megabytes(coll, 1 << 24)))
    assert result.algorithm.provenance["makespan_us"] == pytest.approx(expected.makespan_us)
    assert sum(len(s.sends) for s in result.algorithm.steps) == int(np.array(topo.distances).sum())


def test_greedy_keeps_the_shorter_engine() -> None:
    topo = builtin("torus:4x4")
    coll = make_collective("alltoall", 16)
    mb = greedy_module.chunk_megabytes(coll, 1 << 24)
    dense = greedy_module.run_greedy(topo, coll, mb)
    sparse = run_unicast(topo, coll, link_arrays(topo, mb))
    result = greedy(topo, coll, 1 << 24)
    assert result.algorithm is not None
    assert result.algorithm.provenance["makespan_us"] == pytest.approx(min(dense.makespan_us, sparse.makespan_us))


@pytest.mark.parametrize(("name", "root"), [("alltoall", None), ("gather", 2), ("scatter", 1), ("allgather", None),
                                            ("broadcast", 0)])
def test_one_destination_ends_match_pre_and_post(name: str, root: int | None) -> None:
    coll = make_collective(name, 4, 2, root=root)
    ends = one_destination_ends(coll)
    if all(len(p) == 1 for p in coll.pre) and all(len(p) == 1 for p in coll.post):
        assert ends is not None
        assert ends[0].tolist() == [next(iter(p)) for p in coll.pre]
        assert ends[1].tolist() == [next(iter(p)) for p in coll.post]
    else:
        assert ends is None
        with pytest.raises(GreedyError, match="one of each"):
            chunk_ends(coll)


def test_greedy_alltoall_builds_no_pre_or_post_sets(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past the dense engine's limit (1024-rank AllToAll), the one-destination test, the engine and the check read
    the placements: there the sets would be ~0.5 GB of the run's peak."""
    topo = builtin("torus:2x3")
    coll = make_collective("alltoall", 6, 1)
    monkeypatch.setattr(greedy_module, "MAX_CELLS", 10)
    assert greedy(topo, coll).status.name == "SAT"
    assert "pre" not in coll.__dict__ and "post" not in coll.__dict__
