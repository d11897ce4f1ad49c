"""Hierarchical AllToAll: for every other node, each GPU first collects its node's chunks bound for the GPU with
the same local index on that node (scratch buffer `copy_<node>`), sends them there in one IB transfer, and the
chunks within a node go directly."""

from __future__ import annotations

# MSCCLang's chunk() answers None for an empty slot; these programs only read written ones
from collsynth.language import Buffer
from collsynth.language import written_chunk as chunk


def alltoall_hierarchical(num_nodes: int, gpus_per_node: int) -> None:
    num_ranks = num_nodes * gpus_per_node
    for n1 in range(num_nodes):
        for hop in range(1, num_nodes):
            n2 = (n1 + hop) % num_nodes
            for g1 in range(gpus_per_node):
                for g2 in range(gpus_per_node):
                    chunk(n1 * gpus_per_node + g1, Buffer.input, n2 * gpus_per_node + g2).copy(
                        n1 * gpus_per_node + g2, f"copy_{n2}")
        for hop in range(1, num_nodes):
            n2 = (n1 + hop) % num_nodes
            for g1 in range(gpus_per_node):
                rank = n1 * gpus_per_node + g1
                block = chunk(rank, f"copy_{n2}", 0, gpus_per_node)
                block.copy(n2 * gpus_per_node + g1, Buffer.output, block.get_dst_index(),
                           ch=((n1 + n2) % 8) * 2 + rank % 2 + 2)
    for rank in range(num_ranks):
        for g in range(gpus_per_node):
            piece = chunk(rank, Buffer.input, (rank // gpus_per_node) * gpus_per_node + g)
            piece.copy(piece.get_dst_rank(), Buffer.output, piece.get_dst_index())
