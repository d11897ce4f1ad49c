"""MSCCL++'s own DSL, `mscclpp.language` (microsoft/mscclpp python/mscclpp/language, the MSCCLPPProgram
generation), under the same module layout: a program written for it runs after replacing `mscclpp.language` by
`collsynth.language.mscclpplang` in its imports.

    from collsynth.language.mscclpplang import *                    # MSCCLPPProgram, chunk, rank, Json, Check
    from collsynth.language.mscclpplang.buffer import Buffer
    from collsynth.language.mscclpplang.collectives import AllReduce  # AllGather, AllToAll, Broadcast, ...
    from collsynth.language.mscclpplang.types import ChannelType, DataFormat, ReplicationPolicy

It differs from MSCCLang's MSCCL++ half (collsynth.language.mscclpp) in the constructor only,
`MSCCLPPProgram(name, collective, num_ranks, instances, ...)` without a topology (any rank reaches any), and in
spelling: `ChannelType.memory` / `ChannelType.port` are `sm` / `proxy`, and `put_packet(src_format=...)`
forwards packets. Both lower to the same execution plan, checked by the plan interpreter. NVLS operations
(`group_load_reduce`, `group_store`) and `ReplicationPolicy.packed` are refused with a message naming them.
`Broadcast(num_ranks, chunk_factor, inplace, root)` is MSCCL++'s; `python -m
collsynth.language.mscclpplang.examples.broadcast 8 1` prints a broadcast plan written in this DSL.
"""

from collsynth.language.mscclpplang.program import Check, Json, MSCCLPPProgram, chunk, rank
from collsynth.language.mscclpplang.types import Buffer, ChannelType, DataFormat, ReplicationPolicy

__all__ = ["Buffer", "ChannelType", "Check", "DataFormat", "Json", "MSCCLPPProgram", "ReplicationPolicy", "chunk",
           "rank"]
