"""Errors raised by the compiler passes."""

from collsynth.core.errors import CollsynthError


class CompileError(CollsynthError):
    """A program the compiler cannot turn into valid MSCCL-IR (the message says where and what to change)."""
