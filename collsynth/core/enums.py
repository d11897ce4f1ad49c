"""The enums every stage shares. They are `StrEnum`s: a member equals its wire spelling (`Op.COPY == "copy"`,
`StepType.RECV_REDUCE_COPY == "rrc"`), so JSON, XML and reports keep their text while code names the value."""

from __future__ import annotations

from enum import StrEnum


class Op(StrEnum):
    """What a send in a schedule (or a chunk operation in a program) does at its destination."""

    COPY = "copy"  # overwrite the destination with the source
    REDUCE = "reduce"  # combine the source into the destination with the collective's redop


class Status(StrEnum):
    """The outcome of one synthesis (or one solver call)."""

    SAT = "sat"  # a schedule was found (not proven best)
    OPTIMAL = "optimal"  # a schedule was found and proven best for its objective
    UNSAT = "unsat"  # proven: no schedule within the asked limits
    TIMEOUT = "timeout"  # the time limit ran out before an answer (an algorithm may still have been found)
    INTERRUPTED = "interrupted"  # stopped by the user (SIGINT/SIGTERM); finished work is kept


class StepType(StrEnum):
    """MSCCL-IR step types, spelled as the runtimes' XML loaders spell them."""

    SEND = "s"
    RECV = "r"
    RECV_COPY_SEND = "rcs"
    RECV_REDUCE_SEND = "rrs"
    RECV_REDUCE_COPY = "rrc"
    RECV_REDUCE_COPY_SEND = "rrcs"
    COPY = "cpy"
    REDUCE = "re"
    NOP = "nop"
