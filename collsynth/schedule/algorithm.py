"""`Algorithm`, the schedule IR that every synthesizer returns (DESIGN.md, "Algorithm").

A list of steps; each step has a number of `rounds` and a list of sends `(chunk, src, dst, op)`,
op in {copy, reduce}. All sends of one step read the state at the start of the step. MILP schedules
also carry an estimated start time (and duration) per send. Cost under the model:
`steps * alpha + (rounds / chunks) * size * beta`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from fractions import Fraction
from pathlib import Path
from typing import Any

from collsynth.collectives import Collective
from collsynth.core.enums import Op
from collsynth.core.errors import CollsynthError
from collsynth.schedule.algorithm_json import send_row, write_algorithm_json
from collsynth.topologies import Topology

COPY = Op.COPY  # aliases: a send's op is an `Op` (equal to its wire spelling, "copy" / "reduce")
REDUCE = Op.REDUCE


class AlgorithmError(CollsynthError):
    """An algorithm that is malformed or does not implement its collective on its topology."""


@dataclass(frozen=True, slots=True)
class Send:
    # Slots: a 1024-rank AllToAll has ~17M sends; a slotted Send is 80 bytes, one with a __dict__ ~130.
    chunk: int
    src: int
    dst: int
    op: Op = COPY
    start_us: float | None = None  # timed schedules (MILP, greedy): start time
    duration_us: float | None = None

    def __str__(self) -> str:
        arrow = "+>" if self.op == REDUCE else "->"
        when = f" @{self.start_us:.2f}us" if self.start_us is not None else ""
        return f"c{self.chunk}: {self.src}{arrow}{self.dst}{when}"

    def __getstate__(self) -> tuple[Any, ...]:
        return (self.chunk, self.src, self.dst, self.op, self.start_us, self.duration_us)

    def __setstate__(self, state: tuple[Any, ...] | dict[str, Any]) -> None:
        # a dict: pickled before Send had slots (e.g. cached algorithms of bench/pipeline_scale.py)
        values = tuple(state[name] for name in _SEND_FIELDS) if isinstance(state, dict) else state
        for setter, value in zip(_SEND_SLOTS, values, strict=True):
            setter(self, value)


_SEND_FIELDS = tuple(f.name for f in fields(Send))
# The slots' own setters: storing through them skips the frozen __init__'s object.__setattr__ calls (see
# `send_of_fields`).
_SEND_SLOTS = tuple(getattr(Send, name).__set__ for name in _SEND_FIELDS)


def send_of_fields(chunk: int, src: int, dst: int, op: Op, start_us: float | None,
                   duration_us: float | None) -> Send:
    """Send(chunk, src, dst, op, start_us, duration_us), made without the frozen dataclass's __init__ (less than
    half its cost): for builders of millions of sends, such as the greedy synthesizer."""
    send = _new(Send)
    f0, f1, f2, f3, f4, f5 = _SEND_SLOTS
    f0(send, chunk)
    f1(send, src)
    f2(send, dst)
    f3(send, op)
    f4(send, start_us)
    f5(send, duration_us)
    return send


_new = object.__new__


@dataclass(frozen=True)
class Step:
    rounds: int
    sends: tuple[Send, ...]


@dataclass(frozen=True)
class Algorithm:
    name: str
    topology: Topology
    collective: Collective
    steps: tuple[Step, ...]
    # Where it came from: synthesizer, solver, instance, times (free-form, JSON-able values).
    provenance: Mapping[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def chunks(self) -> int:
        return self.collective.chunks

    @property
    def num_steps(self) -> int:
        return len(self.steps)

    @property
    def rounds(self) -> int:
        return sum(step.rounds for step in self.steps)

    @property
    def bandwidth_cost(self) -> Fraction:
        """Rounds per chunk, R/C."""
        return Fraction(self.rounds, self.chunks)

    def cost(self, alpha: float, beta: float, size: float) -> float:
        """steps * alpha + (rounds / chunks) * size * beta."""
        return self.num_steps * alpha + float(self.bandwidth_cost) * size * beta

    def sends(self) -> list[tuple[int, Send]]:
        return [(t, send) for t, step in enumerate(self.steps) for send in step.sends]

    def to_dict(self, steps: bool = True) -> dict[str, Any]:
        """The JSON document; `steps=False`: with "steps" empty (the streaming writer fills it in)."""
        return {
            "format": "collsynth.algorithm/1",
            "name": self.name,
            "topology": self.topology.to_dict(),
            "collective": self.collective.to_dict(),
            "steps": [
                {"rounds": step.rounds,
                 "sends": [send_row(send) for send in step.sends]}
                for step in self.steps
            ] if steps else [],
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], label: str = "algorithm") -> Algorithm:
        """An algorithm from its JSON document, validated against the declared schema (schedule/schema.py);
        every send's chunk and ranks must exist in its collective and topology."""
        from collsynth.schedule.schema import check_algorithm_dict

        doc = check_algorithm_dict(data, label, AlgorithmError)
        topology = Topology.from_dict(doc.topology, label=f"{label}: topology")
        collective = Collective.from_dict(doc.collective, label=f"{label}: collective")
        steps = []
        for t, step in enumerate(doc.steps):
            sends = []
            for i, x in enumerate(step.sends):
                if x.chunk >= collective.num_chunks or max(x.src, x.dst) >= topology.num_ranks:
                    raise AlgorithmError(f"{label}: steps[{t}].sends[{i}]: chunk {x.chunk} from {x.src} to {x.dst} "
                                         f"is outside the {collective.num_chunks} chunks / {topology.num_ranks} ranks")
                sends.append(Send(x.chunk, x.src, x.dst, Op(x.op), x.start_us, x.duration_us))
            steps.append(Step(step.rounds, tuple(sends)))
        return cls(doc.name, topology, collective, tuple(steps), dict(doc.provenance))

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    def write_json(self, path: str | Path) -> Path:
        """Write `to_json()`'s text to `path` atomically (`core.files.write_atomic`'s rules), streamed a batch of
        sends at a time: the whole text and its dicts are never in memory (schedule/algorithm_json.py)."""
        return write_algorithm_json(self, path)

    @classmethod
    def from_json(cls, text: str, label: str = "algorithm") -> Algorithm:
        from collsynth.core.files import parse_json

        return cls.from_dict(parse_json(text, label, AlgorithmError), label)

    @classmethod
    def load(cls, path: str | Path) -> Algorithm:
        from collsynth.core.files import read_text

        text = read_text(path, AlgorithmError, "the algorithm")
        try:
            return cls.from_json(text, str(path))
        except CollsynthError as exc:  # the schema's messages start with the path; the models' checks do not
            raise type(exc)(exc.args[0] if str(exc).startswith(str(path)) else f"{path}: {exc}") from None

    def __str__(self) -> str:
        lines = [f"algorithm {self.name!r}: {self.collective} on {self.topology.name}, "
                 f"chunks={self.chunks} steps={self.num_steps} rounds={self.rounds}"]
        for t, step in enumerate(self.steps):
            lines.append(f"  step {t} (rounds={step.rounds}): " + ", ".join(str(s) for s in step.sends))
        return "\n".join(lines)
