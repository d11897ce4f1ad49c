"""Built-in topologies, by name with parameters (`ring:8`, `dgx1`, `2xndv2`, ...)."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from collsynth.topologies.model import Link, Topology, TopologyError, links_from_matrix


def ring(num_ranks: int) -> Topology:
    """Bidirectional ring."""
    _at_least(num_ranks, 2, "ring")
    pairs = {(r, (r + 1) % num_ranks) for r in range(num_ranks)} | {((r + 1) % num_ranks, r) for r in range(num_ranks)}
    return Topology(f"ring:{num_ranks}", num_ranks, tuple(Link(s, d) for s, d in sorted(pairs)))


def line(num_ranks: int) -> Topology:
    """Bidirectional chain 0 - 1 - ... - n-1."""
    _at_least(num_ranks, 2, "line")
    pairs = [(r, r + 1) for r in range(num_ranks - 1)] + [(r + 1, r) for r in range(num_ranks - 1)]
    return Topology(f"line:{num_ranks}", num_ranks, tuple(Link(s, d) for s, d in sorted(pairs)))


def fully_connected(num_ranks: int) -> Topology:
    """A direct link between every ordered pair of ranks."""
    _at_least(num_ranks, 2, "fully_connected")
    links = tuple(Link(s, d) for s in range(num_ranks) for d in range(num_ranks) if s != d)
    return Topology(f"fully_connected:{num_ranks}", num_ranks, links)


# DGX-1 (8 V100): hybrid cube-mesh, 6 NVLinks per GPU; pairs joined by two NVLinks have bandwidth 2.
DGX1_NVLINKS = (
    (0, 2, 1, 1, 2, 0, 0, 0),
    (2, 0, 1, 2, 0, 1, 0, 0),
    (1, 1, 0, 2, 0, 0, 1, 0),
    (1, 2, 2, 0, 0, 0, 0, 1),
    (2, 0, 0, 0, 0, 2, 1, 1),
    (0, 1, 0, 0, 2, 0, 1, 2),
    (0, 0, 1, 0, 1, 1, 0, 2),
    (0, 0, 0, 1, 1, 2, 2, 0),
)


def dgx1() -> Topology:
    return Topology("dgx1", 8, links_from_matrix(DGX1_NVLINKS), description="8x V100, NVLink hybrid cube-mesh")


def _at_least(n: int, low: int, name: str) -> None:
    if n < low:
        raise TopologyError(f"{name}:{n} needs at least {low} ranks")


# name -> (builder, number of integer parameters). Read-only.
BUILTINS: MappingProxyType[str, tuple[Callable[..., Topology], int]] = MappingProxyType({
    "ring": (ring, 1),
    "line": (line, 1),
    "fully_connected": (fully_connected, 1),
    "dgx1": (dgx1, 0),
})


def builtin(name: str) -> Topology:
    """Build a built-in topology from its name: `ring:8`, `dgx1`, ..."""
    base, _, args = name.strip().lower().partition(":")
    base = base.replace("-", "_")
    if base not in BUILTINS:
        known = ", ".join(sorted(BUILTINS))
        raise TopologyError(f"unknown topology {name!r}; built-ins are: {known} (or give a path to a JSON file)")
    build, nparams = BUILTINS[base]
    params = [p for p in args.replace("x", ",").split(",") if p] if args else []
    if len(params) != nparams:
        raise TopologyError(f"topology {base!r} takes {nparams} parameter(s), e.g. {base}:8; got {name!r}")
    try:
        return build(*(int(p) for p in params))
    except ValueError as exc:
        if isinstance(exc, TopologyError):
            raise
        raise TopologyError(f"topology {name!r}: parameters must be integers") from None
