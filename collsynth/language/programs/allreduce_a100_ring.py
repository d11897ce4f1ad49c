"""Ring AllReduce (in place, `size` chunks per rank): chunk i starts its reduction at rank i; chunk i runs on
channel i % channels with its own send/receive threadblock (manual placement), so `channels` spreads the ring."""

from __future__ import annotations

# MSCCLang's chunk() answers None for an empty slot; these programs only read written ones
from collsynth.language import Buffer
from collsynth.language import written_chunk as chunk


def allreduce_ring(size: int, channels: int) -> None:
    for step in range(size - 1):  # reduce-scatter: rank i+step+1 adds what rank i+step holds
        for index in range(size):
            lane = index % channels
            here, there = (index + step) % size, (index + step + 1) % size
            chunk(there, Buffer.input, index).reduce(chunk(here, Buffer.input, index), ch=lane, recvtb=lane,
                                                     sendtb=lane)
    for step in range(-1, size - 2):  # all-gather: the sum goes around the ring
        for index in range(size):
            lane = index % channels
            here, there = (index + step) % size, (index + step + 1) % size
            chunk(here, Buffer.input, index).copy(there, Buffer.input, index, ch=lane, recvtb=lane, sendtb=lane)
