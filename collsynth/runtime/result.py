"""The verdict of running an IR, shared by every backend (CPU interpreter, CUDA interpreter), and the error for a
request no backend can run."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from collsynth.core.errors import CollsynthError
from collsynth.core.units import format_size

# Kinds of failure a backend reports (`ExecutionResult.failure`).
DEADLOCK = "deadlock"  # nothing runnable, work left
UNWRITTEN_READ = "unwritten-read"  # a step read a chunk nobody wrote
MISMATCH = "mismatch"  # ran to the end, the postcondition does not hold
MESSAGE_SIZE = "message-size"  # a receive took a message of another size than it expected
LEFTOVER = "leftover-messages"  # a message was sent that no step received
LAYOUT = "layout"  # the IR does not fit the collective's buffers (bounds, nchunksperloop)


class ExecutionError(CollsynthError):
    """A request the backends cannot run (bad size, dtype, op, missing collective); the message says the fix."""


@dataclass(frozen=True)
class ExecutionResult:
    """What a backend did with one IR on one set of inputs.

    `inputs` / `outputs`: per rank, the flat input buffer before the run and the flat output buffer after
    it (for in-place IRs the output buffer aliases the input as MSCCL does), as stored: bfloat16 buffers are
    uint16 bits (collsynth.runtime.numerics.as_values widens them). `seconds`: wall time of the
    run itself (buffers set up and postcondition checked outside it). `details`: one line per stuck
    threadblock (deadlock) or per wrong chunk (mismatch), and so on."""

    passed: bool
    message: str
    collective: str
    ngpus: int
    nbytes: int
    dtype: str
    backend: str
    seconds: float
    outputs: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)
    inputs: tuple[np.ndarray, ...] = field(default=(), compare=False, repr=False)
    failure: str | None = None
    details: tuple[str, ...] = ()
    chunk_elems: int = 0
    tiles: int = 1
    steps_run: int = 0
    max_error: float = 0.0
    # Backend-specific figures (e.g. the CUDA backend's kernel time), as (name, value) text pairs.
    extras: tuple[tuple[str, str], ...] = ()
    # The reduction operator the run used (None: the backend did not record it).
    op: str | None = None

    def verdict(self) -> str:
        """One line: PASS/FAIL, collective, ranks, size, dtype, time, backend (and why, on FAIL)."""
        head = (f"{'PASS' if self.passed else 'FAIL'}  {self.collective}  ngpus={self.ngpus}  "
                f"size={format_size(self.nbytes)}  dtype={self.dtype}{self._op_field()}  "
                f"time={_format_seconds(self.seconds)}  backend={self.backend}")
        return head if self.passed else f"{head}  {self.failure}: {self.message}"

    def _op_field(self) -> str:
        return f"  op={self.op}" if self.op not in (None, "sum") else ""

    def __str__(self) -> str:
        return "\n".join([self.verdict(), *(f"  {line}" for line in self.details)])


def _format_seconds(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.2f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f}ms"
    return f"{seconds * 1e6:.0f}us"
