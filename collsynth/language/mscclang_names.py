"""MSCCLang's remaining public names of `msccl.language` (microsoft/msccl-tools msccl/language/__init__.py),
with its semantics, for programs that use them:

- `create_scratch(rank, name)`: declares a scratch buffer `name` on `rank` of the open program and returns the
  name to pass as a buffer (`chunk(rank, name, i)`, `ref.copy(dst, name, i)`). Scratch buffers also come into
  being on first use, as in MSCCLang, so declaring one is optional; a name the DSL cannot use is refused here.
- `Print()`: prints the open program's traced operations, one per line (MSCCLang prints its chunk DAG).
- `Ref`: MSCCLang's name for the chunk reference that `chunk()` and `copy()` return (our ChunkRef).

MSCCLang's MSCCL++ additions (`Json()`, `Ref.put/get/signal/wait`, ChannelType) are not part of this face:
collsynth writes MSCCL++ plans from the compiled IR instead (`collsynth export mscclpp`).
"""

from __future__ import annotations

from collsynth.language.buffers import BufferLike, buffer_name, is_scratch
from collsynth.language.builder import ChunkRef
from collsynth.language.program import ProgramError

Ref = ChunkRef


def create_scratch(rank: int, name: BufferLike) -> BufferLike:
    """Declare scratch buffer `name` on `rank` of the open program; returns `name` (module docstring)."""
    from collsynth.language import _current

    program = _current("create_scratch")
    if not 0 <= rank < program.num_ranks:
        raise ProgramError(f"create_scratch({rank}, {name!r}): rank {rank} is not in 0..{program.num_ranks - 1}")
    try:
        canonical = buffer_name(name)
    except TypeError as exc:
        raise ProgramError(f"create_scratch({rank}, {name!r}): {exc}") from None
    if not is_scratch(canonical):
        raise ProgramError(f"create_scratch({rank}, {name!r}): {name!r} names an input/output buffer, not a "
                           "scratch buffer; pick another name")
    return name


def Print() -> None:  # noqa: N802 - MSCCLang's name
    """Print the open program's traced operations, one per line."""
    from collsynth.language import _current

    for op in _current("Print").builder.ops:
        print(op)


__all__ = ["Print", "Ref", "create_scratch"]
