"""The MILP pipeline's error (a `CollsynthError`: the CLI prints its one line and exits 2)."""

from __future__ import annotations

from collsynth.core.errors import CollsynthError


class MilpSynthesisError(CollsynthError):
    """A MILP synthesis request that cannot be served (the message says why and what to change)."""
