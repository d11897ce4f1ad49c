"""MSCCLang's `msccl.topologies.nvidia`, for programs that import it by that path: `dgx1()`, `dgx_a100()`,
`nvlink_only(nvidia_smi_topo=None)` (library.py; `dgx_a100()` is MSCCLang's bandwidth-12 model)."""

from collsynth.topologies.library import dgx1, dgx_a100, nvlink_only

__all__ = ["dgx1", "dgx_a100", "nvlink_only"]
