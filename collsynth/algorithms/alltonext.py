"""AllToNext (a user-defined collective, `collsynth.collectives.alltonext`): rank r's input goes to the
output of rank r+1; the last rank sends nothing.

Inside a node that is one direct copy. Across a node boundary one GPU would funnel the whole buffer
through its own NIC, so the buffer is cut into one piece per GPU of the node: piece k goes from the
sender to GPU k of its node, over the network to GPU k of the next node, and from there to the
receiver (steps that would stay on one rank are skipped). Every NIC of the node then carries 1/gpus
of the data, as in MSCCLang's alltonext-forward program.
"""

from __future__ import annotations

from collsynth.algorithms._common import (
    INPUT,
    OUTPUT,
    check_common,
    even_split,
    new_builder,
    node_layout,
    pieces,
    refuse_inplace,
)
from collsynth.collectives.spec import alltonext as alltonext_collective
from collsynth.language.program import Program
from collsynth.topologies.model import Topology


def alltonext(topology: Topology, *, num_nodes: int | None = None, chunks: int | None = None, instances: int = 1,
              protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllToNext; `chunks` defaults to the GPUs per node on a multi-node topology (one piece per NIC)."""
    name = "alltonext"
    refuse_inplace(name, inplace, "AllToNext reads and writes different ranks' buffers")
    n = topology.num_ranks
    if topology.machines is None and num_nodes is None:
        layout: tuple[tuple[int, ...], ...] = (tuple(range(n)),)
    else:
        layout = node_layout(name, topology, num_nodes)
    node_of = {rank: m for m, ranks in enumerate(layout) for rank in ranks}
    gpus = len(layout[0])
    chunks = (gpus if len(layout) > 1 else 1) if chunks is None else chunks
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    coll = alltonext_collective(n, chunks)
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    for src in range(n - 1):
        dst = src + 1
        if node_of[src] == node_of[dst]:
            for start, count in pieces(0, chunks):
                b.chunk(src, INPUT, start, count).copy(dst, OUTPUT, start)
            continue
        here, there = layout[node_of[src]], layout[node_of[dst]]
        relay = f"relay{src}"
        for k, (start, count) in enumerate(even_split(chunks, min(chunks, gpus))):
            piece = b.chunk(src, INPUT, start, count)
            if here[k] != src:
                piece = piece.copy(here[k], relay, start)
            if there[k] != dst:
                piece = piece.copy(there[k], relay, start, ch=1)
                piece.copy(dst, OUTPUT, start)
            else:
                piece.copy(dst, OUTPUT, start, ch=1)
    return b.build()
