"""What running a work item produces: per algorithm and compile variant an `EntryResult`, per item an
`ItemResult`. Plain frozen data, picklable across processes, JSON-able metadata."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from collsynth.catalog.plan import CompileVariant, WorkItem

OK = "ok"
FAILED = "failed"


@dataclass(frozen=True)
class SimPoint:
    """One simulated size (nccl-tests columns), as stored in the catalog."""

    requested_bytes: int  # the size asked for (plan grid)
    size_bytes: int  # nccl-tests' size column (what MSCCL's minBytes/maxBytes compare against)
    count: int
    dtype: str  # nccl-tests type name (float, half, ...)
    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    tiles: int = 1
    extrapolated: bool = False


@dataclass(frozen=True)
class EntryResult:
    """One algorithm compiled with one variant: verified and simulated, or failed at `stage`."""

    name: str
    variant: CompileVariant
    passed: bool
    message: str
    stage: str = ""  # lower | compile | interpret | simulate | xml; "" when it passed
    xml: str | None = None  # MSCCL-IR text; only when the interpreter passed
    chunks: int | None = None
    steps: int | None = None
    rounds: int | None = None
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)
    ir_stats: dict[str, Any] = field(default_factory=dict, compare=False)
    times: tuple[SimPoint, ...] = ()

    def entry_id(self, item_key: str) -> str:
        """Deterministic: the same item, algorithm and variant always get the same id."""
        blob = f"{item_key}|{self.name}|{self.variant.protocol}|{self.variant.instances}|{self.variant.inplace}"
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class ItemResult:
    """The outcome of one work item. `ok` False means the item itself failed (e.g. synthesis raised or
    timed out without a result); its entries may still hold what was done before the failure."""

    key: str
    ok: bool
    message: str
    entries: tuple[EntryResult, ...] = ()
    seconds: float = 0.0
    provenance: dict[str, Any] = field(default_factory=dict, compare=False)


def timed_out(item: WorkItem, timeout_s: float) -> ItemResult:
    return ItemResult(item.key, False, f"timed out after {timeout_s:g} s (raise limits.item_timeout_s in the plan, "
                                       "or lower the synthesizer's limits)")
