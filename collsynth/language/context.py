"""Which DSL program is open: MSCCLang keeps one global current program for `chunk()`, `XML()`, `Json()`,
`Check()`. Both program kinds (MSCCLProgram, MSCCLPPProgram) mark themselves here, so that opening one inside
the other is refused, whichever comes first."""

from __future__ import annotations

from contextvars import ContextVar, Token

from collsynth.language.program import ProgramError

OPEN_PROGRAM: ContextVar[str | None] = ContextVar("collsynth_open_program", default=None)


def open_program(name: str) -> Token[str | None]:
    """Mark program `name` open; refuse when another one is."""
    other = OPEN_PROGRAM.get()
    if other is not None:
        raise ProgramError(f"program {name!r}: program {other!r} is already open; close it first (or use "
                           "ProgramBuilder to build programs side by side)")
    return OPEN_PROGRAM.set(name)
