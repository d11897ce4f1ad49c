"""The forms of the placement passes (compiler/placement.py, compiler/scheduling.py): ChannelledDAG (after
assign_channels), Schedule (after schedule) and Placement (after assign_threadblocks), each printing readably."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from itertools import chain
from operator import attrgetter
from typing import Any, NamedTuple

import numpy as np

from collsynth.compiler.dag import InstrDAG, depths
from collsynth.compiler.errors import CompileError


@dataclass(frozen=True, slots=True)
class ChannelledDAG:
    """The DAG and the channel of every instr (a local copy/reduction without a hint: -1, any). The DAG is the
    previous form's, shared, not copied."""

    dag: InstrDAG
    channel: tuple[int, ...]  # per instr
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # arrays made once, not its value

    def channels(self) -> np.ndarray:
        """`channel` as a read-only array (made on the first call)."""
        return _array(self.cache, "channel", self.channel)

    def __str__(self) -> str:
        instrs, channel = self.dag.instrs, self.channel
        lines = [f"channels assigned: {len(set(c for c in channel if c >= 0))} in use"]
        lines += [f"  {i}: ch{channel[i]:<2} {ins}" for i, ins in enumerate(instrs)]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Schedule:
    dag: InstrDAG  # shared with the ChannelledDAG
    order: tuple[int, ...]  # all instrs, in execution priority order (a topological order)
    channel: tuple[int, ...]  # per instr, the ChannelledDAG's
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)  # arrays made once, not its value

    def order_array(self) -> np.ndarray:
        """`order` as a read-only array (made on the first call)."""
        return _array(self.cache, "order", self.order)

    def channels(self) -> np.ndarray:
        """`channel` as a read-only array (made on the first call)."""
        return _array(self.cache, "channel", self.channel)

    def __str__(self) -> str:
        depth, rdepth = depths(self.dag)  # the priorities the schedule went by
        instrs, channel = self.dag.instrs, self.channel
        lines = [f"schedule of {len(self.order)} instrs (depth, reverse depth)"]
        lines += [f"  {k}: #{i} ({depth[i]},{rdepth[i]}) ch{channel[i]} {instrs[i]}"
                  for k, i in enumerate(self.order)]
        return "\n".join(lines)


def _array(cache: dict[str, Any], name: str, values: tuple[int, ...]) -> np.ndarray:
    got = cache.get(name)
    if got is None:
        got = cache[name] = np.fromiter(values, dtype=np.int64, count=len(values))
        got.flags.writeable = False
    return got


class StepRef(NamedTuple):
    """A step of a rank: its threadblock and its index there (where an instr runs; what a step waits for)."""

    tb: int
    step: int


@dataclass(frozen=True, slots=True)
class TbPlan:
    send: int
    recv: int
    chan: int
    instrs: tuple[int, ...]  # in step order


@dataclass(frozen=True, slots=True, eq=False)
class Placement:
    """The threadblocks of every rank; where each instr runs (`tb_of`, `step_of`, one array each, not a record per
    instr) is derived from `tbs` (made by `of`), never set by hand."""

    dag: InstrDAG
    tbs: tuple[tuple[TbPlan, ...], ...]  # per rank
    tb_of: np.ndarray  # per instr: its threadblock on its rank
    step_of: np.ndarray  # per instr: its index among that threadblock's steps

    @property
    def at(self) -> tuple[StepRef, ...]:
        """Per instr: where it runs on its rank (made on each call)."""
        return tuple(map(_step_ref, zip(self.tb_of.tolist(), self.step_of.tolist(), strict=True)))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Placement) and self.dag == other.dag and self.tbs == other.tbs
                and np.array_equal(self.tb_of, other.tb_of) and np.array_equal(self.step_of, other.step_of))

    __hash__ = None  # type: ignore[assignment]  # (as a dataclass with eq: not hashable)

    @classmethod
    def of(cls, dag: InstrDAG, tbs: tuple[tuple[TbPlan, ...], ...]) -> Placement:
        """The placement of `tbs`, which hold every instr of the DAG exactly once."""
        n = len(dag.instrs)
        plans = [tb for rank_tbs in tbs for tb in rank_tbs]
        lengths = np.fromiter(map(len, map(attrgetter("instrs"), plans)), dtype=np.int64, count=len(plans))
        placed = np.fromiter(chain.from_iterable(map(attrgetter("instrs"), plans)), dtype=np.int64,
                             count=int(lengths.sum()))
        if placed.size != n or n and (placed.min() < 0 or placed.max() >= n or np.bincount(placed).max() != 1):
            raise CompileError("internal error: the threadblocks do not hold every instruction exactly once")
        local = np.concatenate([np.arange(len(rank_tbs), dtype=np.int64) for rank_tbs in tbs] or [np.zeros(0, int)])
        starts = np.cumsum(lengths) - lengths
        tb_of, step_of = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        tb_of[placed] = np.repeat(local, lengths)
        step_of[placed] = np.arange(n) - np.repeat(starts, lengths)
        return cls(dag, tbs, tb_of, step_of)

    def __str__(self) -> str:
        lines = ["threadblocks"]
        for rank, tbs in enumerate(self.tbs):
            for t, tb in enumerate(tbs):
                lines.append(f"  r{rank} tb{t} send={tb.send} recv={tb.recv} chan={tb.chan}")
                lines += [f"    {s}: {self.dag.instrs[i]}" for s, i in enumerate(tb.instrs)]
        return "\n".join(lines)


_step_ref = partial(tuple.__new__, StepRef)  # a StepRef from a (tb, step) pair, without NamedTuple.__new__
