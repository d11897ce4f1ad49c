"""Runtime targets: which runtime loads what collsynth writes, with the limits and spellings read from that
runtime's own loader (facts only; the sources are named per record).

- msccl-executor: Azure/msccl-executor-nccl, src/include/msccl/msccl_struct.h and src/misc/msccl/msccl_parser.cc
  (MSCCL_MAX_NUM_STEPS 64, MSCCL_MAX_COUNT 72 with `count < 72`, MSCCL_MAX_NUM_THREAD_BLOCKS =
  32 per channel x MAXCHANNELS, NCCL's MAXCHANNELS 32, `dependentBid` an int8_t), selection in
  msccl_lifecycle.cc: minBytes <= bytes and (maxBytes == 0 or bytes <= maxBytes), files from MSCCL_ALGO_DIR.
- rccl: ROCm/rccl, the same files (MSCCL_MAX_NUM_STEPS 64, MSCCL_MAX_NUM_THREAD_BLOCKS 64, device.h MAXCHANNELS
  128), the same selection rule and MSCCL_ALGO_DIR.
- msccl-legacy: microsoft/msccl v0.7.4 (MSCCL_MAX_NUM_STEPS 256, MSCCL_MAX_NUM_THREAD_BLOCKS 108*2,
  MSCCL_MAX_NUM_ALGOS 4, MAXCHANNELS 32, `coll="reduce_scatter"`, `custom` collectives), selection
  minBytes <= bytes < maxBytes, files from MSCCL_XML_FILES (colon-separated) or MSCCL_CONFIG.
- none: simulation and Chakra only; the IR's own structural rules, no runtime limits.

`step ids`: a loader reads a step's `s` and refuses `s >= max_steps`; nops count (they carry an `s`).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from collsynth.core.errors import CollsynthError

INT64_MAX = (1 << 63) - 1


class TargetError(CollsynthError):
    """An unknown target, or a request a target's runtime cannot honour."""


@dataclass(frozen=True)
class Target:
    name: str
    runtime: str  # the runtime in words, for messages
    max_steps_per_tb: int  # steps (nops included) in one threadblock
    max_tbs_per_gpu: int  # threadblocks one GPU may run (MSCCL_MAX_NUM_THREAD_BLOCKS)
    max_channels: int  # channels 0..max_channels-1 (MAXCHANNELS)
    max_tbs_per_channel: int  # sending (receiving) threadblocks per channel per GPU
    max_count: int  # chunks one step moves (cnt < MSCCL_MAX_COUNT)
    max_depid: int  # the highest threadblock id a dependency can name (int8_t field)
    max_algorithms: int  # algorithms the runtime loads at once (0: no cap that matters)
    coll_spellings: tuple[tuple[str, str], ...]  # our `coll` spelling -> the runtime's
    accepts_custom: bool  # whether `coll="custom"` (a user-defined collective) loads
    max_bytes_exclusive: bool  # selection: bytes < maxBytes (True) or bytes <= maxBytes (False)
    zero_max_is_unbounded: bool  # maxBytes="0" means no upper limit
    open_max_bytes: int  # the maxBytes written for an open-ended range
    env: str  # how the runtime finds the files
    runtime_limits: bool = True  # False for `none`: no loader at all

    def coll(self, ours: str) -> str:
        """The runtime's `coll` spelling of our (collsynth.ir.coll_spelling) spelling."""
        return dict(self.coll_spellings).get(ours, ours)

    def ours(self, theirs: str) -> str:
        """Our spelling of the runtime's `coll` spelling."""
        return {v: k for k, v in self.coll_spellings}.get(theirs, theirs)

    def selects(self, nbytes: int, min_bytes: int, max_bytes: int) -> bool:
        """Whether the runtime's size rule picks an algorithm with [min_bytes, max_bytes] for nbytes."""
        if nbytes < min_bytes:
            return False
        if max_bytes == 0 and self.zero_max_is_unbounded:
            return True
        return nbytes < max_bytes if self.max_bytes_exclusive else nbytes <= max_bytes

    def write_max_bytes(self, max_bytes: int) -> int:
        """The maxBytes to write for our max_bytes (0 = open-ended), so that the selection rule honours it."""
        if max_bytes == 0:
            return 0 if self.zero_max_is_unbounded else self.open_max_bytes
        return max_bytes + 1 if self.max_bytes_exclusive else max_bytes


_RUNTIME_COLLS = (("reducescatter", "reducescatter"),)

MSCCL_EXECUTOR = Target(
    name="msccl-executor", runtime="MSCCL executor (Azure/msccl-executor-nccl)", max_steps_per_tb=64,
    max_tbs_per_gpu=32 * 32, max_channels=32, max_tbs_per_channel=32, max_count=71, max_depid=127,
    max_algorithms=1024, coll_spellings=_RUNTIME_COLLS, accepts_custom=False, max_bytes_exclusive=False,
    zero_max_is_unbounded=True, open_max_bytes=0, env="MSCCL_ALGO_DIR")
RCCL = Target(
    name="rccl", runtime="RCCL (ROCm/rccl)", max_steps_per_tb=64, max_tbs_per_gpu=64, max_channels=128,
    max_tbs_per_channel=32, max_count=71, max_depid=127, max_algorithms=1024, coll_spellings=_RUNTIME_COLLS,
    accepts_custom=False, max_bytes_exclusive=False, zero_max_is_unbounded=True, open_max_bytes=0,
    env="MSCCL_ALGO_DIR")
MSCCL_LEGACY = Target(
    name="msccl-legacy", runtime="MSCCL v0.7.4 (microsoft/msccl)", max_steps_per_tb=256, max_tbs_per_gpu=216,
    max_channels=32, max_tbs_per_channel=32, max_count=71, max_depid=127, max_algorithms=4,
    coll_spellings=(("reducescatter", "reduce_scatter"),), accepts_custom=True, max_bytes_exclusive=True,
    zero_max_is_unbounded=False, open_max_bytes=INT64_MAX, env="MSCCL_XML_FILES")
NONE = Target(
    name="none", runtime="no runtime (simulation and Chakra only)", max_steps_per_tb=1 << 30,
    max_tbs_per_gpu=1 << 30, max_channels=32, max_tbs_per_channel=32, max_count=71, max_depid=1 << 30,
    max_algorithms=0, coll_spellings=_RUNTIME_COLLS, accepts_custom=True, max_bytes_exclusive=False,
    zero_max_is_unbounded=True, open_max_bytes=0, env="", runtime_limits=False)

TARGETS: MappingProxyType[str, Target] = MappingProxyType(
    {t.name: t for t in (MSCCL_EXECUTOR, RCCL, MSCCL_LEGACY, NONE)})
DEFAULT_TARGET = MSCCL_EXECUTOR.name
XML_TARGETS = ("msccl-executor", "rccl", "msccl-legacy", "none")


def get_target(target: str | Target | None) -> Target:
    """The Target named `target` (None: the default); unknown names are refused naming the known ones."""
    if isinstance(target, Target):
        return target
    name = DEFAULT_TARGET if target is None else target
    if name not in TARGETS:
        raise TargetError(f"unknown target {name!r}; use one of {', '.join(TARGETS)}")
    return TARGETS[name]
