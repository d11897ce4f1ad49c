"""MSCCLang's `msccl.topologies.amd` (sccl/topologies/amd.py), under its names `AMD4`, `AMD8`: `amd4()` (collsynth's
builder, library.py, whose links are MSCCLang's) and
`amd8()`, MSCCLang's model, which is not the built-in `amd8` (collsynth's MI300X platform, `mi300x()`)."""

from __future__ import annotations

from collsynth.topologies import library
from collsynth.topologies.generic import mscclang_named
from collsynth.topologies.library import XGMI_MI50
from collsynth.topologies.model import Topology, links_from_matrix

# MSCCLang's AMD8 (msccl/topologies/amd.py): Infinity Fabric links per pair, symmetric, 5 or 6.
MSCCLANG_AMD8_LINKS = (
    (0, 5, 6, 6, 5, 6, 5, 5),
    (5, 0, 5, 5, 6, 5, 6, 6),
    (6, 5, 0, 6, 5, 6, 5, 5),
    (6, 5, 6, 0, 5, 6, 5, 5),
    (5, 6, 5, 5, 0, 5, 6, 6),
    (6, 5, 6, 6, 5, 0, 5, 5),
    (5, 6, 5, 5, 6, 5, 0, 6),
    (5, 6, 5, 5, 6, 5, 6, 0),
)


def amd4() -> Topology:
    """MSCCLang's `amd4()`: collsynth's builder (library.py, named `amd4` there) under MSCCLang's name `AMD4`."""
    return mscclang_named(library.amd4(), "AMD4")


def amd8() -> Topology:
    """MSCCLang's `amd8()`: 8 GPUs, every pair joined by 5 or 6 Infinity Fabric links (bandwidth 5 or 6), each
    link costed as one MI50-class xGMI link."""
    return Topology("AMD8", 8, links_from_matrix(MSCCLANG_AMD8_LINKS, alpha_us=XGMI_MI50.alpha_us,
                                                 beta_us_per_mb=XGMI_MI50.beta_us_per_mb, kind=XGMI_MI50.kind),
                    description="MSCCLang's AMD8: 5 or 6 xGMI links between every pair of 8 GPUs")


__all__ = ["amd4", "amd8"]
