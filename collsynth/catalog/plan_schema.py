"""Declared schema of catalog plan files (TOML; the format is described in `collsynth.catalog.plan`).

`check_plan_document(data, where)` validates a parsed plan before it is read: exact types (TOML has
integers, floats, booleans, strings and dates: `max_chunks = 6.0`, `inplace = "no"`, a date for a name are
refused, never coerced), finite positive time limits, ranges with the sanity caps that name their environment
variable, synthesizer settings per `kind` (a discriminated union: a setting of another kind is an unknown
key), unknown keys an error naming the closest known key. Semantic checks that need more than the document
(names that refer to each other, sizes, data types, files) stay in `plan.parse_plan`.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from collsynth.catalog.errors import PlanError
from collsynth.core.caps import CHUNKS_PER_RANK, RANKS, STEPS
from collsynth.core.schema import Strict, capped, field_path, known_keys

Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Chunks = Annotated[int, Field(ge=1), capped(CHUNKS_PER_RANK)]
Steps = Annotated[int, Field(ge=1), capped(STEPS)]
Strings = str | list[str]
Protocol = Literal["Simple", "LL", "LL128"]
KINDS = ("pareto", "instance", "least-steps", "milp")


class CompileTable(Strict):
    protocols: Protocol | list[Protocol] = "Simple"
    instances: Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]] = 1
    inplace: bool | list[bool] = False


class LimitsTable(Strict):
    time_limit_s: Seconds = 60.0
    max_chunks: Chunks = 6
    item_timeout_s: Seconds = 1800.0


class _Synthesizer(Strict):
    name: str | None = None
    time_limit_s: Seconds | None = None


class ParetoSettings(_Synthesizer):
    kind: Literal["pareto"]
    max_chunks: Chunks | None = None
    points: Literal["pareto", "all"] = "pareto"


class InstanceSettings(_Synthesizer):
    kind: Literal["instance"]
    chunks: Chunks
    steps: Steps
    rounds: Steps | None = None


class LeastStepsSettings(_Synthesizer):
    kind: Literal["least-steps"]
    chunks: Chunks = 1
    max_steps: Steps | None = None


class MilpSettings(_Synthesizer):
    kind: Literal["milp"]
    sketch: str
    size: str | Annotated[int, Field(ge=1)]
    solver: Literal["highs", "cbc"] = "highs"


Synthesizer = Annotated[ParetoSettings | InstanceSettings | LeastStepsSettings | MilpSettings,
                        Field(discriminator="kind")]


class TargetTable(Strict):
    topology: str
    collectives: Strings
    synthesizers: Strings | None = None
    library: bool | Strings = True
    root: Annotated[int, Field(ge=0), capped(RANKS)] | None = None


class PlanDocument(Strict):
    name: str | None = None
    dtype: str = "float32"
    sizes: str | Annotated[list[str | Annotated[int, Field(ge=1)]], Field(min_length=1)] = "1KB:1GB"
    size_factor: Annotated[int, Field(ge=2, le=1 << 20)] = 2
    compile: CompileTable = CompileTable()
    limits: LimitsTable = LimitsTable()
    synthesizers: list[Synthesizer] = []
    targets: list[TargetTable] = []


def check_plan_document(data: Mapping[str, Any], where: str) -> None:
    """Raise PlanError (one line starting with `where`, naming the field and the fix) unless the parsed plan
    matches the schema."""
    try:
        PlanDocument.model_validate(data)
    except ValidationError as exc:
        raise PlanError(where + _describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    first, branches = _first_error(exc)
    loc = tuple(part for part in first.get("loc", ()) if not _is_tag(part))
    path, kind, value = field_path(loc), first.get("type", ""), first.get("input")
    if kind == "extra_forbidden":
        parent = field_path(loc[:-1])
        prefix = f"{parent}." if parent else ""
        known = _known(_union_kind(first), loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean '{prefix}{close[0]}'?" if close else f"known keys: {', '.join(known)}"
        return f"unknown key '{path}'; {hint}"
    if kind == "missing":
        synth = _union_kind(first)
        if synth is not None and len(loc) == 3:
            return f"{field_path(loc[:2])}: a {synth} synthesizer needs '{loc[-1]}'"
        return f"'{path}' is missing; add it (the format: collsynth/catalog/plan.py, plans/quick.toml)"
    if kind == "union_tag_invalid":
        tag = value.get("kind") if isinstance(value, Mapping) else value
        return f"{path}.kind: unknown synthesizer {tag!r}; use one of {', '.join(KINDS)}"
    if kind == "union_tag_not_found":
        return f"'{path}.kind' is missing; give one of {', '.join(KINDS)}"
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    if "raise it with" in message:  # a sanity cap names the value, the cap and the fix
        return f"'{path}': {message}"
    if len(branches) > 1 and kind.endswith("_type"):  # the value is none of a union's types
        message = "must be " + " or ".join(dict.fromkeys(_TYPE_NAMES.get(str(b), str(b)) for b in branches))
    for old, new in (("Input should be", "must be"), ("greater than or equal to", ">="), ("greater than", ">"),
                     ("less than or equal to", "<="), ("List should have at least 1 item after validation, not 0",
                                                       "is empty, so nothing would be built; give at least one")):
        message = message.replace(old, new)
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return f"'{path}' {message}, got {shown}"


_TYPE_NAMES = {"str": "a string", "list[str]": "a list of strings", "int": "an integer", "bool": "true or false",
               "float": "a number", "constrained-int": "an integer", "list[bool]": "a list of true/false",
               "list[constrained-int]": "a list of integers", "list[union[str,constrained-int]]": "a list of sizes"}


def _is_tag(part: Any) -> bool:
    """A union branch's name in an error location (not a field): `str`, `list[str]`, `constrained-int`, ..."""
    return isinstance(part, str) and (part in _TYPE_NAMES or part in KINDS or any(ch in part for ch in "[(")
                                      or part.startswith(("constrained-", "function-")))


def _first_error(exc: ValidationError) -> tuple[Mapping[str, Any], list[str]]:
    """The error to report and the union branches tried at its field: for a list value, the error about one
    of its items (not "not a string"); else one of a branch whose type matched; otherwise the first."""
    errors = exc.errors(include_url=False)
    first = errors[0]
    loc = tuple(first.get("loc", ()))
    cut = next((i for i, part in enumerate(loc) if _is_tag(part)), None)
    if cut is None:
        return first, []
    group = [e for e in errors if tuple(e.get("loc", ()))[:cut] == loc[:cut]]
    branches = [str(e["loc"][cut]) for e in group if len(e.get("loc", ())) > cut]
    items = [e for e in group if any(isinstance(p, int) for p in tuple(e["loc"])[cut:])]
    constraints = [e for e in group if not str(e.get("type", "")).endswith("_type")]  # right type, bad value
    return (items or constraints or [first])[0], branches


def _union_kind(error: Mapping[str, Any]) -> str | None:
    """The synthesizer kind a location passes through (pydantic names the union branch in it)."""
    return next((str(part) for part in error.get("loc", ()) if part in KINDS), None)


def _known(kind: str | None, loc: tuple[Any, ...]) -> list[str]:
    if len(loc) >= 2 and loc[0] == "synthesizers" and kind is not None:
        models: dict[str, type[BaseModel]] = {"pareto": ParetoSettings, "instance": InstanceSettings,
                                              "least-steps": LeastStepsSettings, "milp": MilpSettings}
        model = models[kind]
        return sorted(model.model_fields)
    return known_keys(PlanDocument, loc)
