"""Declared schemas for input files (pydantic v2): exact types, finite numbers, unknown keys refused.

Each stage declares its file format as `Strict` models (no string-to-number, no float-to-int truncation,
no NaN/Infinity, `extra='forbid'`); `check(model, data, label, error)` validates a parsed document and turns
the first problem into one line: `LABEL: FIELD: problem; fix`, an unknown key with the closest valid key.
pydantic is imported here only, when a file is read (never at `collsynth --help`).
"""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any, TypeVar

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationError

from collsynth.core.caps import Cap

Model = TypeVar("Model", bound=BaseModel)


class Strict(BaseModel):
    """Base of every file schema: exact types, finite numbers, unknown keys an error, immutable."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False, frozen=True)


def capped(cap: Cap) -> AfterValidator:
    """A field validator (`Annotated[int, Field(ge=1), capped(RANKS)]`) refusing values above a sanity cap, in
    the cap's own words (it names the environment variable that raises it)."""
    def within(value: int) -> int:
        if value > cap.limit():
            raise ValueError(f"{value} {cap.what} is above the cap of {cap.limit()} {cap.what}; raise it with "
                             f"{cap.env}=N if you mean it")
        return value
    return AfterValidator(within)


def check(model: type[Model], data: Any, label: str, error: type[Exception]) -> Model:
    """`data` validated against `model`, or `error` with one line naming `label`, the field and the fix."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise error(describe(model, exc, label)) from None


def describe(model: type[BaseModel], exc: ValidationError, label: str) -> str:
    """One line for the first error of a ValidationError."""
    first = exc.errors(include_url=False)[0]
    loc = tuple(first.get("loc", ()))
    kind = first.get("type", "")
    where = field_path(loc)
    value = first.get("input")
    if kind == "extra_forbidden":
        known = known_keys(model, loc[:-1])
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known keys: {', '.join(known)}"
        return f"{label}: {where}: unknown key; {hint}"
    if kind == "missing":
        return f"{label}: {where}: missing; add it (see docs/formats.md)"
    message = first.get("msg", "invalid").removeprefix("Value error, ")
    if "raise it with" in message:  # a sanity cap: its message names the value, the cap and the fix
        return f"{label}: {where or 'document'}: {message}"
    shown = repr(value)
    if len(shown) > 40:
        shown = shown[:37] + "..."
    return f"{label}: {where or 'document'}: {message[0].lower() + message[1:]}, got {shown}; see docs/formats.md"


def field_path(loc: tuple[Any, ...]) -> str:
    """`('links', 3, 'src')` -> `links[3].src`."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif not _is_branch_tag(str(part)):
            text += f".{part}" if text else str(part)
    return text


def _is_branch_tag(part: str) -> bool:
    # pydantic names union branches and function validators in locations; they are not fields
    return any(ch in part for ch in "[(") or part.startswith("function-")


def known_keys(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The field names of the model found by walking `loc` from `model` (empty when the walk fails)."""
    annotation: Any = model
    for part in loc:
        annotation = _model_in(annotation)
        if annotation is None:
            return []
        if isinstance(part, str) and part in annotation.model_fields:
            annotation = annotation.model_fields[part].annotation
        elif isinstance(part, int):
            continue  # an index into a list: _model_in unwraps it
        elif not _is_branch_tag(str(part)):
            return []
    found = _model_in(annotation)
    return sorted(found.model_fields) if found is not None else []


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel inside an annotation such as `Link`, `list[Link]`, `tuple[Link, ...]`, `Link | None`."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (list, tuple, typing.Union, types.UnionType, dict):
        for arg in typing.get_args(annotation):
            found = _model_in(arg)
            if found is not None:
                return found
    return None
