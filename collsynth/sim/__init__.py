"""Alpha-beta simulator with link and switch contention; nccl-tests style tables and busbw plots.

    result = simulate(ir, topology, size_sweep(1024, 1 << 30), dtype="float32")
    print(result.table())

The timing model is documented in `collsynth.sim.engine`; sizes, counts and busbw follow nccl-tests
(`collsynth.sim.nccl`); tiling and the steady-state extrapolation are in `collsynth.sim.simulate`; what the
Simple / LL / LL128 protocols do to a transfer's cost is in `collsynth.sim.protocol`.
"""

from collsynth.sim.engine import FIFO_SLOTS
from collsynth.sim.nccl import DTYPES, NcclSize, SimError, busbw_factor, dtype_info, nccl_size, size_sweep
from collsynth.sim.plot import plot_busbw
from collsynth.sim.simulate import (
    LOCAL_ALPHA_US,
    LOCAL_BETA_US_PER_MB,
    TILE_BYTES_BY_PROTOCOL,
    SimModel,
    SimResult,
    SimRow,
    simulate,
)

__all__ = [
    "DTYPES", "FIFO_SLOTS", "LOCAL_ALPHA_US", "LOCAL_BETA_US_PER_MB", "NcclSize", "SimError", "SimModel", "SimResult",
    "SimRow",
    "TILE_BYTES_BY_PROTOCOL", "busbw_factor", "dtype_info", "nccl_size", "plot_busbw", "simulate", "size_sweep",
]
