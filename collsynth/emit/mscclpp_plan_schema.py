"""Declared schema of an MSCCL++ execution plan (JSON), pydantic v2: the keys the MSCCL++ 0.9.x parser reads,
their exact types, the executor's fixed limits, unknown keys an error naming the closest known key.

What the parser reads, per level (see collsynth/emit/mscclpp_schema.py for the source and docs/formats.md):
top level (`name`, `collective`, `protocol`, `inplace`, `gpus`; optional `reuse_resources`,
`use_double_scratch_buffer`, `buffer_alignment`, `min_message_size`, `max_message_size`,
`num_threads_per_block`; collsynth's own `collsynth.root`), a GPU, its channels, remote buffers and semaphores,
a threadblock, its channel and remote-buffer references, an op and its buffer entries. Keys that the parser
reads but collsynth refuses (`tbg_info`, `iter_context` and a pipeline's `ops`) are declared here so that they
are not "unknown": `mscclpp_schema.check_plan` refuses them with the reason. What needs more than one field
(indices into other lists, ids in order, a GPU's own rank) is checked there too, after this schema.
pydantic is imported only when a plan is checked (`collsynth.core.schema`).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field

from collsynth.core.schema import Strict
from collsynth.emit.mscclpp_limits import (
    MAX_BARRIERS,
    MAX_CHANNELS_PER_OP,
    MAX_OPERATIONS_PER_TB,
    MAX_SEMAPHORES,
)

Index = Annotated[int, Field(ge=0)]
Count = Annotated[int, Field(ge=0)]
Positive = Annotated[int, Field(ge=1)]
BufferType = Literal["i", "o", "s"]
ChannelType = Literal["memory", "port", "switch", "none"]
OpName = Literal["nop", "barrier", "put", "pws", "pwsf", "get", "copy", "signal", "wait", "flush", "re", "res",
                 "rre", "rres", "ppkt", "rppkt", "respkt", "cpkt", "upkt", "repkt", "recpkt", "recspkt", "glres",
                 "gstore", "rlxsignal", "rlxwait", "pipeline", "sem_acquire", "sem_release"]


class BufferRef(Strict):
    """A chunk range of a buffer: local (`type`), remote (`buffer_id`) or a switch channel's."""

    index: Index
    size: Positive
    type: BufferType | None = None
    buffer_id: Index | None = None
    switch_channel_id: Index | None = None


class Op(Strict):
    name: OpName
    channel_type: ChannelType = "none"
    channel_ids: Annotated[list[Index], Field(max_length=MAX_CHANNELS_PER_OP)] = []
    src_buff: Annotated[list[BufferRef], Field(max_length=MAX_CHANNELS_PER_OP)] = []
    dst_buff: Annotated[list[BufferRef], Field(max_length=MAX_CHANNELS_PER_OP)] = []
    semaphore_ids: list[Index] = []
    barrier_id: Annotated[int, Field(ge=0, lt=MAX_BARRIERS)] | None = None
    num_threadblocks: Positive | None = None
    reduce_op: str | None = None  # collsynth's emitter writes it; the executor ignores it
    tbg_info: Any = None  # read by the executor, refused by collsynth (mscclpp_schema.REFUSED_KEYS)
    iter_context: Any = None  # a pipeline's (refused with the pipeline op)
    ops: Any = None  # a pipeline's inner ops (refused with the pipeline op)


class ThreadblockChannels(Strict):
    channel_type: ChannelType
    channel_ids: list[Index]
    buff: BufferType | None = None


class RemoteBufferRefs(Strict):
    access_channel_type: ChannelType
    remote_buffer_ids: list[Index]


class Threadblock(Strict):
    id: Index
    ops: Annotated[list[Op], Field(max_length=MAX_OPERATIONS_PER_TB)]
    channels: list[ThreadblockChannels]
    remote_buffer_refs: list[RemoteBufferRefs] = []


class RankGroup(Strict):
    size: Positive
    ranks: list[Index]


class GpuChannel(Strict):
    """A memory/port channel entry (`connected_to`) or a switch one (`buffer_type`, `rank_groups`)."""

    channel_type: ChannelType
    connected_to: list[Index] | None = None
    buffer_type: BufferType | None = None
    rank_groups: list[RankGroup] | None = None


class RemoteBuffer(Strict):
    rank: Index
    type: BufferType
    access_channel_types: list[ChannelType]


class Semaphore(Strict):
    init_value: int


class Gpu(Strict):
    id: Index
    input_chunks: Count
    output_chunks: Count
    scratch_chunks: Count
    threadblocks: list[Threadblock]
    channels: list[GpuChannel]
    remote_buffers: list[RemoteBuffer]
    semaphores: Annotated[list[Semaphore], Field(max_length=MAX_SEMAPHORES)] = []


class CollsynthFields(Strict):
    root: Index | None = None


class PlanDocument(Strict):
    name: str
    collective: str
    protocol: str  # "LL" means packets; anything else is Simple
    inplace: bool
    gpus: Annotated[list[Gpu], Field(min_length=1)]
    reuse_resources: bool = False
    use_double_scratch_buffer: bool = False
    buffer_alignment: Positive = 16
    min_message_size: Count = 0
    max_message_size: Count | None = None
    num_threads_per_block: Annotated[int, Field(ge=1, le=1024)] = 1024
    collsynth: CollsynthFields | None = None
