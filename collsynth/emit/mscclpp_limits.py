"""The MSCCL++ executor's fixed limits that a plan must respect (MSCCL++ 0.9.x, `src/include/execution_common.hpp`),
shared by the plan schema (`mscclpp_plan_schema.py`), its checker (`mscclpp_schema.py`) and the emitter."""

from __future__ import annotations

MSCCLPP_VERSION = "0.9.x"
MAX_OPERATIONS_PER_TB = 64  # MAX_OPERATION
MAX_CHANNELS_PER_TB = 16  # MAX_CHANNEL (per channel type)
MAX_CHANNELS_PER_OP = 8  # MAX_CHANNEL_PER_OPERATION
MAX_SEMAPHORES = 16  # MAX_DEVICE_SEMAPHORES
MAX_BARRIERS = 16  # MAX_DEVICE_SYNCERS (barrier_id indexes the device syncers)
