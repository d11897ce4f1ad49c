"""MSCCLang's routines (`msccl.language.routines`): ring building blocks that add ops to the open program.

    allgather_ring_inplace(gpus, gpu_offset=0, index_offset=0, ch=0)
    allreduce_ring_inplace(gpus, gpu_offset=0, index_offset=0, ch=0)

Both act on ranks gpu_offset .. gpu_offset+gpus-1 as one ring; the chunk of the k-th ring member sits at index
index_offset + k. The AllGather variant sends each member's input chunk around the ring into that index of every
other member's output (on channel 0, as MSCCLang's routine does); the AllReduce variant reduces each index around
the ring, starting at its owner, then copies the sum around the ring in place, on channel `ch`.
"""

from __future__ import annotations

# MSCCLang's chunk() answers None for an empty slot; these programs only read written ones
from collsynth.language import Buffer
from collsynth.language import written_chunk as chunk


def allgather_ring_inplace(gpus: int, gpu_offset: int = 0, index_offset: int = 0, ch: int = 0) -> None:
    for member in range(gpus):
        rank = gpu_offset + member
        ref = chunk(rank, Buffer.input, 0)
        for hop in range(1, gpus):
            ref = ref.copy(gpu_offset + (member + hop) % gpus, Buffer.output, index_offset + member, ch=0)


def allreduce_ring_inplace(gpus: int, gpu_offset: int = 0, index_offset: int = 0, ch: int = 0) -> None:
    for member in range(gpus):
        index = index_offset + member
        ref = chunk(gpu_offset + member, Buffer.input, index)
        for hop in range(1, gpus):  # reduce around the ring, ending one before the owner
            ref = chunk(gpu_offset + (member + hop) % gpus, Buffer.input, index).reduce(ref, ch=ch)
        for hop in range(gpus - 1):  # the sum goes around once more, overwriting the partial sums
            ref = ref.copy(gpu_offset + (member + hop) % gpus, Buffer.input, index, ch=ch)


__all__ = ["allgather_ring_inplace", "allreduce_ring_inplace"]
