"""fattree:K and uniform link costs (relinked)."""

from __future__ import annotations

import pytest

from collsynth.topologies import TopologyError, builtin
from collsynth.topologies.cluster import fattree, relinked


def test_fattree_shape_and_budgets() -> None:
    topo = builtin("fattree:4")
    assert topo.num_ranks == 8 and topo.num_machines == 4
    assert len(topo.link_list) == 8 * 7
    ups = [s for s in topo.switches if s.name.endswith("_up")]
    assert len(ups) == 4 and all(s.bandwidth == 2 for s in ups)
    # a leaf's uplink budget covers exactly the links that leave the leaf
    leaf0 = next(s for s in ups if s.name == "leaf0_up")
    assert leaf0.links == frozenset((s, d) for s in (0, 1) for d in range(2, 8))


def test_fattree_needs_even_k() -> None:
    with pytest.raises(TopologyError, match="even"):
        fattree(3)


def test_relinked_sets_every_link() -> None:
    topo = relinked(builtin("torus:4x4"), 0.5, 50.0)
    assert {(x.alpha_us, x.beta_us_per_mb) for x in topo.link_list} == {(0.5, 20.0)}
    assert topo.fingerprint() != builtin("torus:4x4").fingerprint()
