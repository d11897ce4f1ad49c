"""THE cost table of the alpha-beta model, shared by the simulator (collsynth.sim), the Chakra exporter
(collsynth.emit.chakra) and any other emitter that states step costs. docs/formats.md, "One cost model",
documents it once.

- Unit: `beta_us_per_mb` is microseconds per MiB (2**20 bytes) of payload, everywhere (topologies, simulator,
  exporters). `MIB` is that unit.
- Transfers (s, r, rcs, rrs, rrc, rrcs): `alpha_us + MiB * beta_us_per_mb` of the link (scaled per protocol in
  collsynth.sim.protocol). A reduction fused into a receive (rrc, rrs, rrcs) streams with the data and costs
  nothing beyond the transfer.
- Standalone local steps, per tile: `cpy` = LOCAL_ALPHA_US + MiB * COPY_BETA_US_PER_MIB; `re` = LOCAL_ALPHA_US +
  MiB * REDUCE_BETA_US_PER_MIB. Justification (independent of any benchmark target): an effective ~500 GB/s of
  HBM bandwidth moves 1 MiB in ~2 us; a copy reads and writes each byte once (2 bytes of traffic per payload
  byte), a reduction reads two operands and writes one (3 bytes), so `re` costs 3/2 of `cpy`.
- `nop` costs nothing (it only carries a dependency).
- The tile loop: a buffer of chunk `c` bytes runs in `ntiles = max(1, ceil(c / tile_bytes(proto)))` tiles, each
  paying alpha once; a step's total charge over the loop is `ntiles * alpha + cnt * c / MiB * beta`.
"""

from __future__ import annotations

import math
from types import MappingProxyType

from collsynth.core.enums import StepType

MIB = 1 << 20  # the model's megabyte: beta_us_per_mb is per MiB of payload

# MSCCL's data per loop iteration with NCCL's default buffers: Simple 4 MiB / 8 steps * 4 chunk steps;
# LL 512 KiB of 16-byte lines / 8 steps, half of each line data; LL128 4.69 MiB / 8 steps, 120/128 data.
TILE_BYTES_BY_PROTOCOL: MappingProxyType[str, int] = MappingProxyType(
    {"Simple": 2 * MIB, "LL": 32 * 1024, "LL128": 576000})

LOCAL_ALPHA_US = 0.1  # a standalone local step: a short launch-free GPU op
COPY_BETA_US_PER_MIB = 2.0  # ~500 GB/s effective HBM bandwidth, 2 bytes of traffic per payload byte
REDUCE_BETA_US_PER_MIB = 3.0  # 3 bytes of traffic per payload byte: 3/2 of a copy


def local_beta(step_type: str, copy_beta: float = COPY_BETA_US_PER_MIB,
               reduce_beta: float = REDUCE_BETA_US_PER_MIB) -> float:
    """The per-MiB cost of a standalone local step (cpy, re); 0 for every other step type."""
    kind = StepType(step_type)
    if kind == StepType.COPY:
        return copy_beta
    if kind == StepType.REDUCE:
        return reduce_beta
    return 0.0


def tiles(chunk_bytes: float, proto: str, tile_bytes: int | None = None) -> int:
    """How many tiles the MSCCL loop runs for chunks of `chunk_bytes`."""
    size = TILE_BYTES_BY_PROTOCOL[proto] if tile_bytes is None else tile_bytes
    return max(1, math.ceil(chunk_bytes / size))


def local_step_us(step_type: str, cnt: int, chunk_bytes: float, ntiles: int, *,
                  alpha_us: float = LOCAL_ALPHA_US, copy_beta: float = COPY_BETA_US_PER_MIB,
                  reduce_beta: float = REDUCE_BETA_US_PER_MIB) -> float:
    """What a standalone local step costs over the whole tile loop (0 for non-local steps and nops)."""
    beta = local_beta(step_type, copy_beta, reduce_beta)
    if beta == 0.0 and StepType(step_type) not in (StepType.COPY, StepType.REDUCE):
        return 0.0
    return ntiles * alpha_us + cnt * chunk_bytes / MIB * beta
