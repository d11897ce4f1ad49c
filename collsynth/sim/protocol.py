"""What the MSCCL/NCCL protocol (Simple, LL, LL128) does to a transfer's alpha-beta cost.

The topology's per-link `alpha_us` / `beta_us_per_mb` describe the Simple protocol. The other two trade
bandwidth for latency: LL (low latency) writes 16-byte lines of 8 data bytes + a flag that the receiver
polls, so there is no fence and no separate "data ready" signal, and LL128 does the same with 128-byte
lines of 120 data bytes. A transfer of m MB over a link of hardware class h under protocol p costs

    alpha_us * HOP_LATENCY_US[h][p] / HOP_LATENCY_US[h]["Simple"]  +  m * beta_us_per_mb / EFFICIENCY[p]

so Simple is exactly the topology's alpha-beta (both factors 1) and every link keeps its own ratio of
latencies between protocols.

Source: NVIDIA NCCL src/graph/tuning.cc (v2.12-era tables; the Ring row, since an MSCCL-IR step is a
point-to-point hop like a ring step and MSCCL runs NCCL's own LL/LL128/Simple primitives):
- per-hop hardware latency `hwLat[hw][RING][proto]` in us, LL / LL128 / Simple:
  NVLink .47 / 1.9 / 3.4, PCI 1.0 / 2.5 / 5.7, network 2.7 / 4.0 / 9.6;
- bandwidth: the data fraction of a line, LL 8/16, LL128 120/128, Simple 1.
Simplified: only the latency *ratios* are used (the topology's alpha stays the measured Simple value);
NCCL's per-collective base latency `baseLat` (LL 3.6, LL128 10.0, Simple 8.4 us for Ring) is not added,
since it is a per-launch cost the simulator does not model for Simple either; NCCL's tuner derates LL
further (busBw x 1/4 for AllReduce, 1/3 otherwise) and caps LL128 per channel, which is not modelled:
the efficiencies here are the wire formats' data fractions only.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from collsynth.ir import PROTOCOLS
from collsynth.sim.nccl import SimError

# NCCL tuning.cc hwLat, Ring algorithm, per hop in microseconds: {hardware class: {protocol: us}}.
HOP_LATENCY_US: Mapping[str, Mapping[str, float]] = MappingProxyType({
    "nvlink": MappingProxyType({"LL": 0.47, "LL128": 1.9, "Simple": 3.4}),
    "pci": MappingProxyType({"LL": 1.0, "LL128": 2.5, "Simple": 5.7}),
    "net": MappingProxyType({"LL": 2.7, "LL128": 4.0, "Simple": 9.6}),
})

# Data bytes per byte on the wire: LL 8 of each 16-byte line, LL128 120 of each 128-byte line.
EFFICIENCY: Mapping[str, float] = MappingProxyType({"Simple": 1.0, "LL": 8 / 16, "LL128": 120 / 128})

# Topology link kinds -> NCCL hardware class; a kind not listed counts as NVLink (the Link default).
HARDWARE_CLASS_OF_KIND: Mapping[str, str] = MappingProxyType({
    "nvlink": "nvlink", "xgmi": "nvlink", "nvswitch": "nvlink",
    "pcie": "pci", "pci": "pci", "shm": "pci",
    "ib": "net", "net": "net", "roce": "net", "ethernet": "net",
})


def check_protocol(proto: str, where: str) -> None:
    """Raise a SimError naming `where` when `proto` is not Simple, LL or LL128."""
    if proto not in PROTOCOLS:
        raise SimError(f"{where}: unknown protocol {proto!r}; use one of {', '.join(PROTOCOLS)}")


def latency_scale(proto: str, link_kind: str) -> float:
    """Factor on a link's (Simple) alpha under `proto`: hwLat[class][proto] / hwLat[class][Simple]."""
    if proto == "Simple":
        return 1.0
    latencies = HOP_LATENCY_US[HARDWARE_CLASS_OF_KIND.get(link_kind, "nvlink")]
    return latencies[proto] / latencies["Simple"]


def beta_scale(proto: str) -> float:
    """Factor on a link's (Simple) beta under `proto`: wire bytes per data byte."""
    return 1.0 / EFFICIENCY[proto]
