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

Rules every loader above shares (read in microsoft/msccl src/graph/topo.cc mscclGetAlgoFromXMLAndSetAlgo and
src/include/msccl.h, Azure/msccl-executor-nccl src/misc/msccl/msccl_parser.cc mscclGetAlgoFromXmlFile and
src/include/msccl/msccl_struct.h, ROCm/rccl src/misc/msccl/msccl_parser.cc at 4bb0b4a3, the same walk):
- threadblock ids of a gpu are 0..n-1 without a gap ("thread block %d is missing"), none repeated.
- `s >= MSCCL_MAX_NUM_STEPS` and `cnt >= MSCCL_MAX_COUNT` (72) refused; `id >= MSCCL_MAX_NUM_THREAD_BLOCKS` refused
  ("too many thread blocks are requested"); `chan < 0 || chan > MAXCHANNELS` refused.
- per channel at most MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL (32) threadblocks with a send peer and 32 with a
  receive peer ("too many sends per channel" / "too many recvs per channel").
- srcoff/dstoff are stored as int16_t (mscclTransfer / mscclTransmission), dependentBid as int8_t.
- dependencies: nops before a step add their (depid, deps) to that step's list; a step that ends such a list must
  carry a dependency itself ("when there is a chain of dependencies, the last reduction must be a part of the first
  immediate instruction ... XML will be ignored").
- legacy only: the algo element needs `inplace`; minBytes defaults to 0 and maxBytes to 1<<27 (128 MB) when
  absent; minBytes > maxBytes, minBytes < 0 or maxBytes < 0 refused (so maxBytes="0" with minBytes > 0 is
  refused); MSCCL_XML_FILES is split on ':' and loading stops at MSCCL_MAX_NUM_ALGOS (4) ("too many algorithms
  ... The rest will be ignored"); MSCCL_CONFIG (<msccl_algos><load path minbytes maxbytes proto/>) counts against
  the same cap. Selection (src/collectives/all_to_all.cc and enqueue): ngpus == nRanks, count % nchunksperloop
  == 0, nbytes >= minBytes && nbytes < maxBytes.
- executor/RCCL: minBytes, maxBytes, inplace and outofplace are required attributes (read without a default).
- every target: connections of NCCL_STEPS = 8 slots (`fifo_slots`, the simulator's FIFO depth too): an IR is
  checked for deadlock with 8 messages in flight per connection (collsynth.ir.deadlock).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from collsynth.core.errors import CollsynthError
from collsynth.core.limits import FIFO_SLOTS

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
    max_offset: int = 32767  # srcoff/dstoff are int16_t in every loader's transfer record
    max_reduce_fusion: int = 16  # MSCCL_MAX_REDUCE_FUSION: a chain of `re` steps on one dst is cut at the 16th
    fifo_slots: int = FIFO_SLOTS  # messages a connection holds before its sender blocks (NCCL_STEPS, every loader)

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
    zero_max_is_unbounded=True, open_max_bytes=0, env="", runtime_limits=False, max_offset=1 << 30)

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
