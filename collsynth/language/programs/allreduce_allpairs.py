"""All-pairs AllReduce (in place, size*size chunks per rank): every rank sends block r2 to rank r2's scratch,
each rank adds the received blocks into its own block, then sends its reduced block to every other rank."""

from __future__ import annotations

# MSCCLang's chunk() answers None for an empty slot; these programs only read written ones
from collsynth.language import Buffer
from collsynth.language import written_chunk as chunk


def allreduce_allpairs(size: int) -> None:
    for sender in range(size):
        for owner in range(size):
            if sender != owner:
                chunk(sender, Buffer.input, owner * size, size=size).copy(owner, "scratch", sendtb=owner,
                                                                          recvtb=sender)
    for rank in range(size):
        for k in range(size * (size - 1)):  # received slot k holds piece k % size of some peer's block
            chunk(rank, Buffer.input, rank * size + k % size).reduce(chunk(rank, "scratch", k), sendtb=k % size)
    for owner in range(size):
        for peer in range(size):
            if owner != peer:
                chunk(owner, Buffer.input, owner * size, size).copy(peer, Buffer.input, owner * size, sendtb=peer,
                                                                    recvtb=owner)
