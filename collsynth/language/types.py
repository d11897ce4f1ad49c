"""MSCCLang's `msccl.language.types` names that programs import: channel types and replication policies of the
MSCCL++ half, and the MSCCL-IR instruction spellings (microsoft/msccl-tools, now Azure/msccl-tools,
msccl/language/types.py; our code, MSCCLang's names and values).

`from collsynth.language.types import ChannelType, ReplicationPolicy` is what an MSCCL++ program writes in
place of `from msccl.language.types import ...`.
"""

from __future__ import annotations

from enum import Enum

from collsynth.language.buffers import Buffer, ThreadblockPolicy


class ChannelType(Enum):
    """How a rank reaches a peer: `sm` a memory channel (inside a node), `proxy` a port channel (DMA through
    the proxy, across nodes), `nvls` a switch (multimem) channel, `none` no channel (local work)."""

    proxy = "proxy"
    sm = "sm"
    none = "none"
    nvls = "nvls"
    # MSCCL++'s own DSL renamed the two (python/mscclpp/language/types.py): the same members under those names
    port = "proxy"
    memory = "sm"

    def __str__(self) -> str:
        return self.value


# The MSCCL++ 0.9.x execution plan's channel_type for each DSL channel type.
PLAN_CHANNEL = {ChannelType.sm: "memory", ChannelType.proxy: "port", ChannelType.nvls: "switch",
                ChannelType.none: "none"}


class ReplicationPolicy(Enum):
    """How `instances` copies of an MSCCL++ program share the buffers: `interleaved` cuts every chunk into
    `instances` consecutive parts (instance k takes part k), `duplicated` gives instance k the k-th copy of the
    whole buffer (chunk i of instance k at i + k * buffer size: fine for AllReduce, but it scatters the ranks'
    blocks of an AllGather, which the plan interpreter then reports), `packed` (not supported here) makes the
    copies share chunks and channels."""

    duplicated = "duplicated"
    interleaved = "interleaved"
    packed = "packed"

    def __str__(self) -> str:
        return self.value


class DataFormat(Enum):
    """MSCCL++'s DSL: what `put_packet` reads, `raw` data (written out as packets) or `packet`s that arrived
    earlier (forwarded as they are, the executor's read-put-packet)."""

    raw = "raw"
    packet = "packet"

    def __str__(self) -> str:
        return self.value


class ChunkInstruction(Enum):
    start = "start"
    reduce = "reduce"
    send = "send"

    def __str__(self) -> str:
        return self.value


class Instruction(Enum):
    """The MSCCL-IR step types, spelled as in the XML."""

    delete = "d"
    start = "st"
    nop = "nop"
    send = "s"
    recv = "r"
    recv_copy_send = "rcs"
    recv_reduce_send = "rrs"
    recv_reduce_copy = "rrc"
    recv_reduce_copy_send = "rrcs"
    copy = "cpy"
    reduce = "re"

    def __str__(self) -> str:
        return self.value


__all__ = ["PLAN_CHANNEL", "Buffer", "ChannelType", "ChunkInstruction", "DataFormat", "Instruction",
           "ReplicationPolicy", "ThreadblockPolicy"]
