"""Errors of the catalog stage (bad plans, missing or foreign databases, impossible exports)."""

from collsynth.core.errors import CollsynthError


class CatalogError(CollsynthError):
    """A catalog request that cannot be done (the message names the problem and the fix)."""


class PlanError(CatalogError):
    """A malformed plan file (the message names the file, the field and the fix)."""
