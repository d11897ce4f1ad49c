"""`Algorithm`, the schedule IR that every synthesizer returns (DESIGN.md, "Algorithm").

A list of steps; each step has a number of `rounds` and a list of sends `(chunk, src, dst, op)`,
op in {copy, reduce}. All sends of one step read the state at the start of the step. MILP schedules
also carry an estimated start time (and duration) per send. Cost under the model:
`steps * alpha + (rounds / chunks) * size * beta`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

from collsynth.collectives import Collective
from collsynth.core.enums import Op
from collsynth.core.errors import CollsynthError
from collsynth.topologies import Topology

COPY = Op.COPY  # aliases: a send's op is an `Op` (equal to its wire spelling, "copy" / "reduce")
REDUCE = Op.REDUCE


class AlgorithmError(CollsynthError):
    """An algorithm that is malformed or does not implement its collective on its topology."""


@dataclass(frozen=True)
class Send:
    chunk: int
    src: int
    dst: int
    op: Op = COPY
    start_us: float | None = None  # MILP schedules: estimated start time
    duration_us: float | None = None

    def __str__(self) -> str:
        arrow = "+>" if self.op == REDUCE else "->"
        when = f" @{self.start_us:.2f}us" if self.start_us is not None else ""
        return f"c{self.chunk}: {self.src}{arrow}{self.dst}{when}"


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": "collsynth.algorithm/1",
            "name": self.name,
            "topology": self.topology.to_dict(),
            "collective": self.collective.to_dict(),
            "steps": [
                {"rounds": step.rounds,
                 "sends": [_send_to_list(send) for send in step.sends]}
                for step in self.steps
            ],
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Algorithm:
        try:
            steps = tuple(
                Step(int(step["rounds"]), tuple(_send_from_list(x) for x in step["sends"]))
                for step in data["steps"]
            )
            return cls(str(data["name"]), Topology.from_dict(data["topology"]),
                       Collective.from_dict(data["collective"]), steps, dict(data.get("provenance", {})))
        except KeyError as exc:
            raise AlgorithmError(f"algorithm JSON is missing the field {exc.args[0]!r}") from None
        except (TypeError, IndexError) as exc:
            raise AlgorithmError(f"algorithm JSON is malformed ({exc})") from None

    def to_json(self, indent: int | None = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Algorithm:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise AlgorithmError(f"not valid JSON ({exc.msg} at line {exc.lineno})") from None

    @classmethod
    def load(cls, path: str | Path) -> Algorithm:
        try:
            return cls.from_json(Path(path).read_text())
        except OSError as exc:
            raise AlgorithmError(f"{path}: cannot read ({exc.strerror})") from None
        except AlgorithmError as exc:
            raise AlgorithmError(f"{path}: {exc}") from None

    def __str__(self) -> str:
        lines = [f"algorithm {self.name!r}: {self.collective} on {self.topology.name}, "
                 f"chunks={self.chunks} steps={self.num_steps} rounds={self.rounds}"]
        for t, step in enumerate(self.steps):
            lines.append(f"  step {t} (rounds={step.rounds}): " + ", ".join(str(s) for s in step.sends))
        return "\n".join(lines)


def _send_to_list(send: Send) -> list[Any]:
    row: list[Any] = [send.chunk, send.src, send.dst, send.op]
    if send.start_us is not None:
        row += [send.start_us, send.duration_us]
    return row


def _send_from_list(row: list[Any]) -> Send:
    spelling = str(row[3]) if len(row) > 3 else COPY
    if spelling not in (COPY, REDUCE):
        raise AlgorithmError(f"send {row}: op must be 'copy' or 'reduce'")
    op = Op(spelling)
    start = float(row[4]) if len(row) > 4 and row[4] is not None else None
    duration = float(row[5]) if len(row) > 5 and row[5] is not None else None
    return Send(int(row[0]), int(row[1]), int(row[2]), op, start, duration)
