"""Three-step AllToAll across nodes: chunks bound for another node are gathered on the GPU that owns that node
pair's IB connection (scratch buffer named by the (node, node) tuple), sent over IB in `ib_connections` pieces,
then scattered to their final ranks; chunks within a node go directly."""

from __future__ import annotations

# MSCCLang's chunk() answers None for an empty slot; these programs only read written ones
from collsynth.language import Buffer
from collsynth.language import written_chunk as chunk
from collsynth.language.builder import ChunkRef


def alltoall_three_step(num_nodes: int, gpus_per_node: int, instances: int = 1, ib_connections: int = 1) -> None:
    def rank_of(node: int, gpu: int) -> int:
        return node * gpus_per_node + gpu

    def ib_gpus(n1: int, n2: int) -> tuple[int, int]:
        """The GPU on n1 that sends n1->n2 traffic over IB, and the GPU on n2 that receives it."""
        def local(a: int, b: int) -> int:
            return (b if a > b else b - 1) % gpus_per_node
        return rank_of(n1, local(n1, n2)), rank_of(n2, local(n2, n1))

    gathered: dict[tuple[int, int], ChunkRef] = {}
    for n1 in range(num_nodes):
        for g1 in range(gpus_per_node):
            r1 = rank_of(n1, g1)
            for lane in range(instances):
                for n2 in range(num_nodes):
                    if n1 != n2:
                        block = chunk(r1, Buffer.input, (n2 * instances + lane) * gpus_per_node, gpus_per_node)
                        key = (n1, n2)
                        moved = block.copy(ib_gpus(n1, n2)[0], buffer=key, ch=lane * 2)
                        gathered[key] = gathered[key].group(moved) if key in gathered else moved
                    else:
                        for g2 in range(gpus_per_node):
                            piece = chunk(r1, Buffer.input, rank_of(n2, g2) * instances + lane)
                            piece.copy(rank_of(n2, g2), buffer=Buffer.output, index=piece.get_dst_index(),
                                       ch=lane * 2)
    for key, block in gathered.items():
        receiver = ib_gpus(*key)[1]
        for part, piece in enumerate(block.split(ib_connections)):
            lane = piece.rank % 2 if ib_connections == 1 else part
            landed = piece.copy(receiver, buffer=key, ch=lane)
            for single in landed.split(landed.size):
                single.copy(single.get_dst_rank(), buffer=Buffer.output, index=single.get_dst_index(),
                            ch=lane * 2 + 1)
