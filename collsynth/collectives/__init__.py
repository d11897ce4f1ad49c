"""Collective specifications: chunks, pre/postconditions, buffer layout (DESIGN.md, "Collective")."""

from collsynth.collectives.spec import (
    STANDARD,
    Collective,
    CollectiveError,
    alltonext,
    canonical_name,
    custom_collective,
    display_name,
    load_collective,
    make_collective,
    resolve_collective,
)

__all__ = [
    "STANDARD", "Collective", "CollectiveError", "alltonext", "canonical_name", "custom_collective",
    "display_name", "load_collective", "make_collective", "resolve_collective",
]
