"""`mscclpp.language.collectives`: `Collective` and the built-in collectives, with MSCCL++'s constructors
`(num_ranks, chunk_factor, inplace)` (`Broadcast` adds `root`) and MSCCLang's buffer layouts (the same classes as
collsynth.language.collectives)."""

from collsynth.language.collectives import (
    AllGather,
    AllReduce,
    AllToAll,
    Broadcast,
    Chunk,
    Collective,
    ReduceChunk,
    ReduceScatter,
    SendRecv,
)

__all__ = ["AllGather", "AllReduce", "AllToAll", "Broadcast", "Chunk", "Collective", "ReduceChunk", "ReduceScatter",
           "SendRecv"]
