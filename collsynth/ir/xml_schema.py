"""Declared schema of MSCCL-IR XML attributes: per element (`algo`, `gpu`, `tb`, `step`) the attributes the
loaders read, their types and ranges. The semantic rules (ids in order, peers, buffer ranges, dependencies)
stay in `ir.validate`; this is the shape every reader checks first, element by element, with the line.

Values are XML text, so an integer is exactly ASCII decimal digits with an optional `-` (no `4.0`, `0x10`,
`1e3`), 64-bit as the loaders read them; counts are capped (`core.caps`, each cap naming the environment
variable that raises it); enumerations are the loaders' spellings (`reduce_scatter`, msccl-tools' spelling,
is read too); an unknown attribute is an error naming the closest known one (a misspelt optional attribute
would otherwise be silently replaced by its default).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError

from collsynth.core.caps import CHUNKS, RANKS, STEPS
from collsynth.core.limits import MAX_CHANNELS, MAX_COUNT
from collsynth.core.schema import Strict, capped


def _decimal(value: Any) -> Any:
    """XML text -> int: ASCII decimal digits with an optional leading '-', within 64 bits."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    digits = text[1:] if text.startswith("-") else text
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 19 or not -(2**63) <= int(text) < 2**63:
        raise ValueError("not an integer (decimal digits, 64-bit)")
    return int(text)


def _flag(value: int) -> int:
    if value not in (0, 1):
        raise ValueError("it must be 0 or 1")
    return value


Integer = Annotated[int, BeforeValidator(_decimal)]
Flag = Annotated[Integer, AfterValidator(_flag)]
Count = Annotated[Integer, Field(ge=0), capped(CHUNKS)]  # chunks of a buffer, per loop
Rank = Annotated[Integer, Field(ge=0), capped(RANKS)]
Peer = Annotated[Integer, Field(ge=-1), capped(RANKS)]  # -1: no peer
Offset = Annotated[Integer, Field(ge=-1), capped(CHUNKS)]  # -1: unused (a nop's operands)
Bytes = Annotated[Integer, Field(ge=0)]
Buffer = Literal["i", "o", "s"]
Collective = Literal["allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "gather",
                     "scatter", "alltoallv", "send", "recv", "custom", "reduce_scatter"]
StepKind = Literal["s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop"]


class AlgoAttributes(Strict):
    # checked in this order (the first problem is reported): what the file is for, then its shape
    coll: Collective
    inplace: Flag
    outofplace: Flag | None = None
    name: Annotated[str, Field(min_length=1, max_length=255)]  # the loaders' MAX_STR_LEN
    proto: Literal["Simple", "LL", "LL128"]
    nchannels: Annotated[Integer, Field(ge=1, le=MAX_CHANNELS)]
    nchunksperloop: Annotated[Integer, Field(ge=1), capped(CHUNKS)]
    ngpus: Annotated[Integer, Field(ge=1), capped(RANKS)]
    minBytes: Bytes | None = None  # noqa: N815  (the loaders' attribute names)
    maxBytes: Bytes | None = None  # noqa: N815


class GpuAttributes(Strict):
    id: Rank
    i_chunks: Count
    o_chunks: Count
    s_chunks: Count


class ThreadblockAttributes(Strict):
    id: Annotated[Integer, Field(ge=0), capped(STEPS)]
    send: Peer
    recv: Peer
    chan: Annotated[Integer, Field(ge=0, lt=MAX_CHANNELS)]


class StepAttributes(Strict):
    s: Annotated[Integer, Field(ge=0), capped(STEPS)]
    type: StepKind
    srcbuf: Buffer
    srcoff: Offset
    dstbuf: Buffer
    dstoff: Offset
    cnt: Annotated[Integer, Field(ge=0, le=MAX_COUNT)]
    depid: Annotated[Integer, Field(ge=-1)] | None = None
    deps: Annotated[Integer, Field(ge=-1)] | None = None
    hasdep: Flag | None = None


ELEMENTS: Mapping[str, type[Strict]] = {"algo": AlgoAttributes, "gpu": GpuAttributes, "tb": ThreadblockAttributes,
                                        "step": StepAttributes}


def check_xml_attributes(tag: str, attributes: Mapping[str, str], where: str, error: type[Exception]) -> None:
    """Raise `error` (one line: `WHERE: <tag> attribute 'x': problem; fix`) unless the attributes of a `tag`
    element match its schema. Elements other than the four are left to the reader (it names them)."""
    model = ELEMENTS.get(tag)
    if model is None:
        return
    try:
        model.model_validate(dict(attributes))
    except ValidationError as exc:
        raise error(f"{where}: <{tag}> {_describe(model, exc)}") from None


def _describe(model: type[BaseModel], exc: ValidationError) -> str:
    first = exc.errors(include_url=False)[0]
    name = str(first["loc"][0]) if first.get("loc") else "?"
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        close = difflib.get_close_matches(name, list(model.model_fields), n=1)
        hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(model.model_fields)}"
        return f"unknown attribute {name!r}; {hint}"
    if kind == "missing":
        return f"attribute {name!r} is missing; add it (docs/formats.md lists the MSCCL-IR attributes)"
    value = first.get("input")
    shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:21] + "..."
    if isinstance(value, str) and value.strip().lstrip("-").isascii() and value.strip().lstrip("-").isdigit():
        shown = value.strip()  # a number: as the file writes it
    message = str(first.get("msg", "invalid")).removeprefix("Value error, ")
    for prefix in ("Input should be", "String should"):
        message = message.replace(prefix, "it must be" if prefix == "Input should be" else "it should")
    separator = ", " if message.startswith("not ") else "; "
    return f"attribute {name!r} is {shown}{separator}{message}"
