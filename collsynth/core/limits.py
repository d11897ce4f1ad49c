"""The MSCCL runtime's limits, shared by every stage that must respect them (the DSL's library splits
transfers by them; the IR validator and the compiler refuse anything beyond them). Per-runtime limits live
in collsynth.core.targets; these names are the loosest structural limits every target shares (kept importable
for the stages that use them)."""

MAX_STEPS_PER_TB = 256  # steps in one threadblock (msccl-legacy; msccl-executor and RCCL allow 64: targets.py)
MAX_COUNT = 71  # chunks one step may move
MAX_CHANNELS = 32  # channels per algorithm
MAX_TBS_PER_CHANNEL = 32  # threadblocks one GPU may run on one channel (MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL)
# Messages one connection holds before its sender blocks: NCCL's NCCL_STEPS = 8 FIFO slots per connection
# (msccl-executor-nccl, RCCL and msccl v0.7.4 alike). A step sends one message per tile; the checks that gate
# emission (compiler, interpreter) count one slot per message, as the simulator does (collsynth/sim/engine.py).
FIFO_SLOTS = 8
