"""Buffer names and threadblock policies of the DSL (MSCCLang spellings).

A program names a buffer with `Buffer.input`, `Buffer.output`, `Buffer.scratch` or any string (a named
scratch buffer). Inside a `Program` every buffer is a plain string: "input", "output", or the scratch
buffer's name ("scratch" for `Buffer.scratch`). The strings "i"/"input" and "o"/"output" also mean the
input and output buffers, so a native program may write `"input"` instead of importing `Buffer`.
"""

from __future__ import annotations

from enum import Enum

INPUT = "input"
OUTPUT = "output"
SCRATCH = "scratch"


class Buffer(Enum):
    """MSCCLang's buffer names; the values are the MSCCL-IR spellings."""

    input = "i"
    output = "o"
    scratch = "s"

    def __str__(self) -> str:
        return self.value


class ThreadblockPolicy(Enum):
    """`manual`: the sendtb/recvtb hints place instructions; `auto`: the compiler places them."""

    auto = "auto"
    manual = "manual"

    def __str__(self) -> str:
        return self.value


_ALIASES = {"i": INPUT, INPUT: INPUT, "o": OUTPUT, OUTPUT: OUTPUT, "s": SCRATCH, SCRATCH: SCRATCH,
            Buffer.input: INPUT, Buffer.output: OUTPUT, Buffer.scratch: SCRATCH}


_INPUT_ENUM, _OUTPUT_ENUM = Buffer.input, Buffer.output

# What a program may name a buffer with: MSCCLang takes any hashable as a scratch buffer's name.
BufferLike = Buffer | str | tuple[object, ...] | int


def buffer_name(buffer: BufferLike) -> str:
    """The canonical program-level name of a buffer given as a `Buffer` or a string."""
    if buffer is _INPUT_ENUM:  # identity checks first: hashing an Enum member runs Python code
        return INPUT
    if buffer is _OUTPUT_ENUM:
        return OUTPUT
    known = _ALIASES.get(buffer) if isinstance(buffer, (str, Buffer)) else None
    if known is not None:
        return known
    if isinstance(buffer, str) and buffer:
        return buffer
    if isinstance(buffer, (tuple, int, frozenset)) and not isinstance(buffer, bool):
        try:
            hash(buffer)
        except TypeError:
            pass
        else:  # MSCCLang names scratch buffers by any hashable, e.g. (n1, n2): one buffer per distinct value
            return repr(buffer)
    raise TypeError(f"a buffer is Buffer.input/output/scratch, a non-empty string or a hashable scratch name such "
                    f"as a tuple, got {buffer!r}")


def is_scratch(name: str) -> bool:
    return name != INPUT and name != OUTPUT


def public_buffer(name: str) -> Buffer | str:
    """The MSCCLang-facing value for a canonical name (what `ref.buffer` shows)."""
    if name == INPUT:
        return Buffer.input
    if name == OUTPUT:
        return Buffer.output
    if name == SCRATCH:
        return Buffer.scratch
    return name


def policy_name(policy: ThreadblockPolicy | str) -> str:
    value = policy.value if isinstance(policy, ThreadblockPolicy) else str(policy).lower()
    if value not in ("auto", "manual"):
        raise ValueError(f"threadblock policy must be 'auto' or 'manual', got {policy!r}")
    return value
