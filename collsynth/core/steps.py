"""THE step-semantics table: what each MSCCL-IR step type does. The compiler, the IR validator, the
interpreters, the simulator, the CUDA flattening and the exporters all read this table; nobody else lists
which step types send, receive or reduce.

A step reads `srcbuf[srcoff:srcoff+cnt]` (its own GPU) and/or the chunk arriving from the threadblock's receive
peer, and writes `dstbuf[dstoff:dstoff+cnt]` (its own GPU) and/or sends to the threadblock's send peer:

    s     send src                          r     dst = recv
    rcs   dst = recv; send recv             rrs   send (recv + src)
    rrc   dst = recv + src                  rrcs  dst = recv + src; send dst
    cpy   dst = src                         re    dst = dst + src
    nop   nothing (carries dependencies)
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

from collsynth.core.enums import StepType


@dataclass(frozen=True)
class StepSemantics:
    sends: bool  # sends cnt chunks to the threadblock's send peer
    receives: bool  # receives cnt chunks from the threadblock's recv peer
    reduces: bool  # combines two values with the redop
    reads_src: bool  # reads srcbuf[srcoff:] on its own GPU
    writes_dst: bool  # writes dstbuf[dstoff:] on its own GPU
    code: int  # the step's number in the CUDA interpreter kernel (interpreter.cu's CS_* codes)
    traffic: int  # bytes of device memory read + written per byte the step moves (buffers and FIFO slots)

    @property
    def local(self) -> bool:
        """Neither sends nor receives: a local copy/reduce or a nop."""
        return not (self.sends or self.receives)


STEP_SEMANTICS: MappingProxyType[StepType, StepSemantics] = MappingProxyType({
    #                             sends  recv   reduce reads  writes code traffic
    StepType.SEND: StepSemantics(True, False, False, True, False, 0, 2),
    StepType.RECV: StepSemantics(False, True, False, False, True, 1, 2),
    StepType.RECV_COPY_SEND: StepSemantics(True, True, False, False, True, 2, 3),
    StepType.RECV_REDUCE_SEND: StepSemantics(True, True, True, True, False, 3, 3),
    StepType.RECV_REDUCE_COPY: StepSemantics(False, True, True, True, True, 4, 3),
    StepType.RECV_REDUCE_COPY_SEND: StepSemantics(True, True, True, True, True, 5, 4),
    StepType.COPY: StepSemantics(False, False, False, True, True, 6, 2),
    StepType.REDUCE: StepSemantics(False, False, True, True, True, 7, 3),
    StepType.NOP: StepSemantics(False, False, False, False, False, 8, 0),
})

SENDING_TYPES = frozenset(t for t, sem in STEP_SEMANTICS.items() if sem.sends)
RECEIVING_TYPES = frozenset(t for t, sem in STEP_SEMANTICS.items() if sem.receives)
REDUCING_TYPES = frozenset(t for t, sem in STEP_SEMANTICS.items() if sem.reduces)
LOCAL_SRC_TYPES = frozenset(t for t, sem in STEP_SEMANTICS.items() if sem.reads_src)  # read srcbuf on their GPU
LOCAL_DST_TYPES = frozenset(t for t, sem in STEP_SEMANTICS.items() if sem.writes_dst)  # write dstbuf on their GPU
LOCAL_TYPES = frozenset(t for t, sem in STEP_SEMANTICS.items() if sem.local and t != StepType.NOP)  # cpy, re


def semantics(step_type: str) -> StepSemantics:
    """The semantics of a step type given as a `StepType` or its XML spelling."""
    return STEP_SEMANTICS[StepType(step_type)]
