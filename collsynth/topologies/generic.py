"""MSCCLang's `msccl.topologies.generic`, for programs that import it by that path: `fully_connected(n)`,
`ring(n)`, `line(n)`, `star(n, non_blocking=True)`, `hub_and_spoke(n)` (collsynth's builders, library.py)."""

from collsynth.topologies.library import fully_connected, hub_and_spoke, line, ring, star

__all__ = ["fully_connected", "hub_and_spoke", "line", "ring", "star"]
