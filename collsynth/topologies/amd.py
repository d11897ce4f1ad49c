"""MSCCLang's `msccl.topologies.amd`, for programs that import it by that path: `amd4()`, `amd8()` (library.py;
`amd8()` is MSCCLang's 5/6-link model)."""

from collsynth.topologies.library import amd4, amd8

__all__ = ["amd4", "amd8"]
