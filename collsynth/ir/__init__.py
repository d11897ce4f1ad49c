"""The compiled IR: plain, immutable data that mirrors MSCCL-IR exactly.

Every backend (XML emitter, CPU interpreter, CUDA interpreter, simulator, Chakra exporter) consumes
this and nothing else. Field names follow the MSCCL-IR XML attributes so that the mapping is 1:1:

    Algo(name, collective, proto, nchannels, nchunksperloop, ngpus, inplace, min_bytes, max_bytes, gpus)
    Gpu(id, i_chunks, o_chunks, s_chunks, tbs)
    Threadblock(id, send, recv, chan, steps)
    Step(s, type, srcbuf, srcoff, dstbuf, dstoff, cnt, depid, deps, hasdep)

Buffers are named "i" (input), "o" (output), "s" (scratch) as in the XML. A threadblock's `send` /
`recv` is the peer rank, -1 for none. A step's `depid`/`deps` name one threadblock and one step of
the same GPU to wait for (-1/-1 for none); several dependencies are expressed with `nop` steps.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from collsynth.core.enums import StepType
from collsynth.core.limits import MAX_CHANNELS, MAX_COUNT, MAX_STEPS_PER_TB, MAX_TBS_PER_CHANNEL  # noqa: F401  (re-exported)
from collsynth.core.steps import RECEIVING_TYPES, REDUCING_TYPES, SENDING_TYPES  # noqa: F401  (re-exported)

# MSCCL-IR step types and what they do: one table in collsynth.core.steps (re-exported under the names the
# stages have always used).
SEND = StepType.SEND
RECV = StepType.RECV
RECV_COPY_SEND = StepType.RECV_COPY_SEND
RECV_REDUCE_SEND = StepType.RECV_REDUCE_SEND
RECV_REDUCE_COPY = StepType.RECV_REDUCE_COPY
RECV_REDUCE_COPY_SEND = StepType.RECV_REDUCE_COPY_SEND
COPY = StepType.COPY
REDUCE = StepType.REDUCE
NOP = StepType.NOP
STEP_TYPES = tuple(StepType)

BUFFERS = ("i", "o", "s")
PROTOCOLS = ("Simple", "LL", "LL128")

# MSCCL runtime limits (checked by the compiler before anything is emitted) live in collsynth.core.limits.


@dataclass(frozen=True, slots=True)  # slots: one object per step for the collector, not two (1024-rank compiles)
class Step:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int = -1
    deps: int = -1
    hasdep: bool = False

    def __str__(self) -> str:
        dep = f" after tb{self.depid}.s{self.deps}" if self.depid >= 0 else ""
        flag = " [hasdep]" if self.hasdep else ""
        if self.type == NOP:
            return f"s{self.s}: nop{dep}{flag}"
        return (f"s{self.s}: {self.type} {self.srcbuf}[{self.srcoff}] -> {self.dstbuf}[{self.dstoff}]"
                f" x{self.cnt}{dep}{flag}")


@dataclass(frozen=True)
class Threadblock:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[Step, ...]

    def __str__(self) -> str:
        head = f"  tb{self.id} send={self.send} recv={self.recv} chan={self.chan}"
        return "\n".join([head] + [f"    {step}" for step in self.steps])


@dataclass(frozen=True)
class Gpu:
    id: int
    i_chunks: int
    o_chunks: int
    s_chunks: int
    tbs: tuple[Threadblock, ...]

    def __str__(self) -> str:
        head = f"gpu{self.id} i={self.i_chunks} o={self.o_chunks} s={self.s_chunks}"
        return "\n".join([head] + [str(tb) for tb in self.tbs])


@dataclass(frozen=True)
class Algo:
    name: str
    collective: str  # MSCCL `coll` spelling: allgather, allreduce, alltoall, reducescatter, ... (coll_spelling)
    proto: str
    nchannels: int
    nchunksperloop: int
    ngpus: int
    inplace: bool
    gpus: tuple[Gpu, ...]
    min_bytes: int = 0
    max_bytes: int = 0  # 0 means "no upper limit" as in the MSCCL loader
    # Not part of MSCCL-IR: free-form provenance kept for the catalog; never emitted to XML.
    meta: tuple[tuple[str, str], ...] = field(default=(), compare=False)

    def threadblocks(self) -> Iterator[tuple[Gpu, Threadblock]]:
        for gpu in self.gpus:
            for tb in gpu.tbs:
                yield gpu, tb

    @property
    def num_steps(self) -> int:
        return sum(len(tb.steps) for _, tb in self.threadblocks())

    def __str__(self) -> str:
        head = (f"algo {self.name!r} coll={self.collective} proto={self.proto} ngpus={self.ngpus} "
                f"nchannels={self.nchannels} nchunksperloop={self.nchunksperloop} "
                f"inplace={int(self.inplace)} bytes=[{self.min_bytes}, {self.max_bytes or 'inf'}]")
        return "\n".join([head] + [str(gpu) for gpu in self.gpus])


# The `coll` values the current MSCCL loaders (msccl-executor-nccl, RCCL) accept, plus `custom` (the older MSCCL
# loader's name for a user-defined collective); see collsynth/emit/msccl_xml.py.
MSCCL_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "alltoall", "broadcast", "reduce", "gather",
                     "scatter", "alltoallv", "send", "recv", "custom")


def coll_spelling(name: str) -> str:
    """The MSCCL `coll` spelling of a collective name: `ReduceScatter`/`reduce_scatter` -> `reducescatter`,
    `AllGather` -> `allgather`; a user-defined collective -> `custom` (run it with its Collective)."""
    key = "".join(ch for ch in name.lower() if ch.isalnum())
    return key if key in MSCCL_COLLECTIVES else "custom"
