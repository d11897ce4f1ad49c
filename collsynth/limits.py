"""The MSCCL runtime's limits, shared by every stage that must respect them (the DSL's library splits
transfers by them; the IR validator and the compiler refuse anything beyond them)."""

MAX_STEPS_PER_TB = 256  # steps in one threadblock
MAX_COUNT = 71  # chunks one step may move
MAX_CHANNELS = 32  # channels per algorithm
