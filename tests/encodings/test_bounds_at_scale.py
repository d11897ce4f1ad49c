"""Lower bounds at scale: the vectorised step bound equals the per-commodity definition (and refuses the same
unreachable instances), and the flow LP hands over to the cut bound past its column limit."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.encodings import bounds
from collsynth.encodings.bounds import ImpossibleCollectiveError, data_paths, lower_bound_steps
from collsynth.encodings.cut_bounds import cut_bound_rounds_per_chunk
from collsynth.topologies import Topology, builtin
from collsynth.topologies.model import Link


def _reference_steps(topo: Topology, coll) -> int | None:  # type: ignore[no-untyped-def]
    worst = 0
    for c in range(coll.num_chunks):
        for commodity in data_paths(coll, c):
            hops = min(topo.distances[s][commodity.sink] for s in commodity.sources)
            if hops == float("inf"):
                return None
            worst = max(worst, int(hops))
    return worst


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), n=st.integers(2, 7),
       name=st.sampled_from(["allgather", "broadcast", "alltoall", "reducescatter", "allreduce", "reduce", "gather"]))
def test_step_bound_matches_the_definition(seed: int, n: int, name: str) -> None:
    rng = random.Random(seed)
    pairs = sorted({(u, v) for u in range(n) for v in range(n) if u != v and rng.random() < 0.4})
    topo = Topology(f"r{seed}", n, tuple(Link(u, v) for u, v in pairs))
    coll = make_collective(name, n, root=rng.randrange(n))
    expected = _reference_steps(topo, coll)
    if expected is None:
        with pytest.raises(ImpossibleCollectiveError, match="no path from rank"):
            lower_bound_steps(topo, coll)
    else:
        assert lower_bound_steps(topo, coll) == expected


def test_lp_past_its_column_limit_gives_the_cut_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    topo, coll = builtin("torus:3x3"), make_collective("allgather", 9)
    lp = bounds.lower_bound_rounds_per_chunk(topo, coll)
    monkeypatch.setattr(bounds, "MAX_FLOW_COLUMNS", 10)
    cut = bounds.lower_bound_rounds_per_chunk(topo, coll)
    assert cut == cut_bound_rounds_per_chunk(topo, coll)
    assert cut <= lp
