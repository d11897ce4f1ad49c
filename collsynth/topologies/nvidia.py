"""MSCCLang's `msccl.topologies.nvidia`: `dgx1()`, `dgx_a100()`, `nvlink_only(nvidia_smi_topo=None)`, under
MSCCLang's names (`DGX1`, `DGX_A100`, `NVLinkOnly`; msccl/topologies/nvidia.py).

`dgx1()` and `nvlink_only()` are collsynth's builders (library.py, named `dgx1` and `nvlink_only` there), whose
links are MSCCLang's. `dgx_a100()` is MSCCLang's model, which is not collsynth's model of the machine (the
built-in `ndv4`, alias `dgx_a100`).
"""

from __future__ import annotations

from collsynth.topologies import library
from collsynth.topologies.generic import mscclang_named
from collsynth.topologies.library import NVSWITCH_A100
from collsynth.topologies.model import Topology


def dgx1() -> Topology:
    return mscclang_named(library.dgx1(), "DGX1")


def nvlink_only(nvidia_smi_topo: str | None = None) -> Topology:
    return mscclang_named(library.nvlink_only(nvidia_smi_topo), "NVLinkOnly")


def dgx_a100() -> Topology:
    """MSCCLang's `dgx_a100()` (msccl/topologies/nvidia.py): 8 GPUs, every ordered pair linked with bandwidth 12
    (the A100's 12 NVLinks, which NVSwitch lets any one peer use), no switch budgets. Each link costs an A100
    NVSwitch port under the alpha-beta model. collsynth's model of the machine, with one port budget per GPU and
    direction, is the built-in `ndv4` (also named `dgx_a100` by `builtin()`)."""
    links = tuple(NVSWITCH_A100.link(s, d, 12) for s in range(8) for d in range(8) if s != d)
    return Topology("DGX_A100", 8, links,
                    description="MSCCLang's DGX A100: bandwidth 12 between every pair of 8 GPUs, no switch budgets")


__all__ = ["dgx1", "dgx_a100", "nvlink_only"]
