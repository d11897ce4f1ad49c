"""MSCCLang's `msccl.topologies.topology`, for programs that import `Topology` by that path (model.py's class,
which also takes MSCCLang's `Topology(name, links, switches)`)."""

from collsynth.topologies.model import Topology

__all__ = ["Topology"]
