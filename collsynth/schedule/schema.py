"""The declared schema of algorithm files (`Algorithm.to_dict`, format `collsynth.algorithm/1`): exact types,
finite times, unknown keys refused, the format version checked, steps and sends within the sanity caps.
The embedded topology and collective are checked by their own stages' schemas."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from collsynth.core.caps import SENDS, STEPS
from collsynth.core.schema import Strict, check

FORMAT = "collsynth.algorithm/1"
Index = Annotated[int, Field(ge=0)]
Time = Annotated[float, Field(ge=0)]


class SendSchema(Strict):
    """A send, written as the list `[chunk, src, dst, op]` or `[chunk, src, dst, op, start_us, duration_us]`."""

    chunk: Index
    src: Index
    dst: Index
    op: Literal["copy", "reduce"] = "copy"
    start_us: Time | None = None
    duration_us: Time | None = None

    @model_validator(mode="before")
    @classmethod
    def _from_list(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not 3 <= len(value) <= 6:
                raise ValueError("a send is [chunk, src, dst, op] or [chunk, src, dst, op, start_us, duration_us]")
            return dict(zip(("chunk", "src", "dst", "op", "start_us", "duration_us"), value, strict=False))
        return value


class StepSchema(Strict):
    rounds: Index
    sends: list[SendSchema]


class AlgorithmSchema(Strict):
    format: Literal["collsynth.algorithm/1"] = "collsynth.algorithm/1"
    name: str
    topology: dict[str, Any]
    collective: dict[str, Any]
    steps: list[StepSchema]
    provenance: dict[str, Any] = {}


def check_algorithm_dict(data: Any, label: str, error: type[Exception]) -> AlgorithmSchema:
    """Validate an algorithm document (not its embedded topology and collective) and the caps."""
    if isinstance(data, dict) and "format" in data and data["format"] != FORMAT:
        raise error(f"{label}: format: {data['format']!r} is not a format this collsynth reads; it reads {FORMAT!r} "
                    "(write the file with this version of collsynth)")
    if isinstance(data, dict) and isinstance(data.get("steps"), list):
        STEPS.check(len(data["steps"]), f"{label}: steps", error)
    doc = check(AlgorithmSchema, data, label, error)
    SENDS.check(sum(len(step.sends) for step in doc.steps), f"{label}: sends", error)
    return doc
