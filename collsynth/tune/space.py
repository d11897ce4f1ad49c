"""The tuning space: candidates (which algorithm), configurations, and the grid the search walks.

After AutoCCL (NSDI'25): the *implementation subspace* (which algorithm: every Pareto point, MILP schedule
and library program; which protocol: Simple, LL, LL128) is small and its axes do not order, so it is
searched exhaustively; the *resource parameters* (instances = channels per connection and chunks per loop,
how the sends of a step become messages, instruction fusion, threadblocks per connection) are searched by
coordinate descent, since time is unimodal along each of them.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass, field
from typing import Any

from collsynth.core.errors import CollsynthError
from collsynth.ir import PROTOCOLS
from collsynth.language.lower import MERGE_MODES
from collsynth.language.program import Program
from collsynth.schedule.algorithm import Algorithm

SYNTHESIZED, MILP, LIBRARY = "synthesized", "milp", "library"


class TuneError(CollsynthError):
    """Bad tuning input (an algorithm that does not fit, an empty size range, ...)."""


@dataclass(frozen=True)
class Candidate:
    """One algorithm the tuner may pick: a schedule to lower (synthesized or MILP) or a library program."""

    name: str
    source: str  # SYNTHESIZED, MILP or LIBRARY
    algorithm: Algorithm | None = field(default=None, compare=False)
    program: Program | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if (self.algorithm is None) == (self.program is None):
            raise TuneError(f"candidate {self.name!r}: give exactly one of an algorithm and a program")

    @property
    def lowered(self) -> bool:
        """Whether the compiler lowers a schedule (then the merge axis applies)."""
        return self.algorithm is not None


@dataclass(frozen=True, order=True)
class Config:
    """One point of the space: an algorithm, a protocol and the resource parameters."""

    algorithm: str
    protocol: str = "Simple"
    instances: int = 1
    merge: str = "contiguous"  # collsynth.language.lower.MERGE_MODES
    fusion: bool = True  # instr_fusion: r+s -> rcs, rrc+s -> rrcs
    pair_threadblocks: bool = True  # a plain send/receive may share another connection's threadblock
    timed_order: bool = False  # lowered schedules: a rank's sends through one port in program order (a MILP
    # schedule's timing; otherwise the lowering's rotated peer order, which keeps switch ports collision-free)
    timed_merge: bool = False  # timed (MILP) schedules: a link's message runs also grow downwards (fewer alphas)

    def label(self) -> str:
        return (f"{self.algorithm} {self.protocol} x{self.instances} {self.merge}"
                f"{'' if self.fusion else ' nofuse'}{'' if self.pair_threadblocks else ' tb/conn'}"
                f"{' timed' if self.timed_order else ''}{' timed-merge' if self.timed_merge else ''}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Config:
        return cls(str(data["algorithm"]), str(data["protocol"]), int(data["instances"]), str(data["merge"]),
                   bool(data["fusion"]), bool(data["pair_threadblocks"]), bool(data.get("timed_order", False)),
                   bool(data.get("timed_merge", False)))


# The resource axes, in descent order; ORDERED axes are line-searched from the current value outwards.
# Message merging, fusion and threadblocks per connection are one joint axis (8 values): together they decide
# how a step's transfers become messages and which share a threadblock (a fused relay pins its receive and
# send to one), and one without the others can trap the descent (DGX-1 ReduceScatter at 1MB: from staged,
# fused, tb/conn neither axis alone reaches contiguous, unfused, tb/conn, 3% faster).
RESOURCE_AXES: tuple[tuple[str, ...], ...] = (("instances",), ("merge", "fusion", "pair_threadblocks"),
                                              ("timed_order",), ("timed_merge",))
ORDERED_AXES = frozenset({("instances",)})


@dataclass(frozen=True)
class Grid:
    """The values each axis may take (the same grid for the tuner and the exhaustive search)."""

    protocols: tuple[str, ...] = PROTOCOLS
    instances: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7, 8)
    merge: tuple[str, ...] = MERGE_MODES
    fusion: tuple[bool, ...] = (True, False)
    pair_threadblocks: tuple[bool, ...] = (True, False)
    timed_order: tuple[bool, ...] = (False, True)  # MILP schedules, and synthesized ones on switch topologies
    timed_merge: tuple[bool, ...] = (False, True)  # applies to timed (MILP) schedules only

    def __post_init__(self) -> None:
        if not self.protocols or any(p not in PROTOCOLS for p in self.protocols):
            raise TuneError(f"protocols must be some of {', '.join(PROTOCOLS)}, got {self.protocols}")
        if not self.instances or any(k < 1 for k in self.instances) or list(self.instances) != sorted(
                set(self.instances)):
            raise TuneError(f"instances must be increasing integers >= 1, got {self.instances}")
        if not self.merge or any(m not in MERGE_MODES for m in self.merge):
            raise TuneError(f"merge modes must be some of {', '.join(MERGE_MODES)}, got {self.merge}")
        if not self.fusion or not self.pair_threadblocks or not self.timed_order or not self.timed_merge:
            raise TuneError("every axis needs at least one value")

    def values(self, axis: str, candidate: Candidate) -> tuple[Any, ...]:
        if axis == "merge" and not candidate.lowered:
            return ("contiguous",)  # a library program is already a program: nothing to merge
        if axis == "timed_order" and not (candidate.source == MILP or candidate.algorithm is not None
                                          and candidate.algorithm.topology.switches):
            return (False,)  # library programs keep their own order; without switch ports an untimed order is moot
        if axis == "timed_merge" and candidate.source != MILP:
            return (False,)  # nothing timed to keep
        return tuple(getattr(self, axis))

    def joint_values(self, axes: tuple[str, ...], candidate: Candidate) -> tuple[tuple[Any, ...], ...]:
        """Every combination of the values of `axes` (one axis: its values as 1-tuples)."""
        return tuple(itertools.product(*(self.values(axis, candidate) for axis in axes)))

    def start(self, candidate: Candidate, protocol: str) -> Config:
        """Where the descent starts: the first value of every axis (the compiler's defaults first)."""
        return Config(candidate.name, protocol, self.instances[0], self.values("merge", candidate)[0],
                      self.fusion[0], self.pair_threadblocks[0], self.values("timed_order", candidate)[0],
                      self.values("timed_merge", candidate)[0])

    def every(self, candidate: Candidate) -> list[Config]:
        """Every configuration of `candidate` in the grid (the exhaustive search)."""
        return [Config(candidate.name, p, k, m, f, t, o, g) for p in self.protocols for k in self.instances
                for m in self.values("merge", candidate) for f in self.fusion for t in self.pair_threadblocks
                for o in self.values("timed_order", candidate) for g in self.values("timed_merge", candidate)]
