"""Multi-node programs: hierarchical AllReduce and the two-step / three-step AllToAll.

Ranks are grouped by node (`_common.node_layout`); "GPU (m, g)" is the g-th rank of node m. Every node
holds the same number of GPUs, `gpus`.

Hierarchical AllReduce (BlueConnect-style), buffer of n*chunks chunks cut into `gpus` blocks and each
block into `nodes` sub-blocks of `chunks` chunks:
  1. intra-node ReduceScatter: a ring in each node (over the node's links) reduces block g onto GPU (m, g);
  2. inter-node ReduceScatter: a ring over the GPUs (*, g) reduces sub-block (g, m) onto GPU (m, g);
  3. inter-node AllGather of the sub-blocks over the same rings;
  4. intra-node AllGather of the blocks over the node rings.
Only steps 2 and 3 cross nodes, and they carry 1/gpus of the buffer.

Two-step AllToAll: GPU (m, g) first gathers, from every GPU of its node, the blocks bound for GPU
(m', g) of each other node m' (in a scratch buffer ordered by source GPU), then sends them to (m', g)
in one transfer, which lands contiguously in the receiver's output. Blocks for the own node go direct.

Three-step AllToAll: for each ordered node pair (m, m') one gateway GPU of m gathers everything m sends
to m' (gpus x gpus blocks), sends it in one transfer (split at the runtime's count limit) to the
matching gateway of m', which scatters it to its node. Fewer, larger inter-node messages than two-step.
"""

from __future__ import annotations

from collections.abc import Sequence

from collsynth.algorithms._common import (
    INPUT,
    OUTPUT,
    AlgorithmError,
    check_common,
    find_ring,
    new_builder,
    node_layout,
    pieces,
    refuse_inplace,
    require_contiguous_nodes,
    require_multi_node,
)
from collsynth.collectives.spec import make_collective
from collsynth.language.builder import ChunkRef, ProgramBuilder
from collsynth.language.program import Program
from collsynth.topologies.model import Topology


def _ring_reduce(b: ProgramBuilder, ranks: Sequence[int], owner_pos: int, start: int, count: int,
                 ch: int | None) -> ChunkRef:
    """Reduce chunks [start, start+count) of the input buffers of `ranks` around the ring, ending on
    ranks[owner_pos]; returns the reference to the sum there."""
    k = len(ranks)
    acc = b.chunk(ranks[(owner_pos + 1) % k], INPUT, start, count)
    for hop in range(2, k + 1):
        acc = b.chunk(ranks[(owner_pos + hop) % k], INPUT, start, count).reduce(acc, ch=ch)
    return acc


def _ring_spread(b: ProgramBuilder, ranks: Sequence[int], owner_pos: int, ref: ChunkRef, start: int,
                 ch: int | None) -> None:
    """Pass `ref` (on ranks[owner_pos]) around the ring into everyone's output at `start`."""
    k = len(ranks)
    for hop in range(1, k):
        ref = ref.copy(ranks[(owner_pos + hop) % k], OUTPUT, start, ch=ch)


def _node_ring(name: str, topology: Topology, ranks: Sequence[int]) -> tuple[int, ...]:
    ring = find_ring(topology, ranks)
    if ring is None:
        raise AlgorithmError(f"{name}: no ring through node ranks {list(ranks)} in topology {topology.name!r}")
    return ring


def hierarchical_allreduce(topology: Topology, *, num_nodes: int | None = None, chunks: int = 1,
                           instances: int = 1, protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllReduce as intra-node RS, inter-node RS, inter-node AG, intra-node AG (rings at both levels)."""
    name = "hierarchical_allreduce"
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    layout = node_layout(name, topology, num_nodes)
    require_multi_node(name, layout)
    nodes, gpus = len(layout), len(layout[0])
    n = topology.num_ranks
    coll = make_collective("allreduce", n, chunks, inplace=inplace)
    # Blocks and sub-blocks differ in size; batched replication keeps each instance in its own part of the
    # buffers (safe for AllReduce, whose chunks are independent), where interleaving would mix them.
    b = new_builder(name, topology, coll, instances=instances, protocol=protocol)
    block = nodes * chunks  # chunks per block; block g is [g*block, (g+1)*block)
    columns = [[layout[m][g] for m in range(nodes)] for g in range(gpus)]  # the inter-node ring of GPU index g
    node_rings = [_node_ring(name, topology, ranks) for ranks in layout]
    intra_ch, inter_ch = 0, 1
    if gpus > 1:
        for m in range(nodes):
            for g in range(gpus):
                for start, count in pieces(g * block, block):
                    _ring_reduce(b, node_rings[m], node_rings[m].index(layout[m][g]), start, count, intra_ch)
    for g in range(gpus):
        for m in range(nodes):
            start = g * block + m * chunks
            owned = _ring_reduce(b, columns[g], m, start, chunks, inter_ch)
            if not inplace:
                owned.copy(layout[m][g], OUTPUT, start)
            _ring_spread(b, columns[g], m, owned, start, inter_ch)
    if gpus > 1:
        for m in range(nodes):
            for g in range(gpus):
                for start, count in pieces(g * block, block):
                    owned = b.chunk(layout[m][g], OUTPUT, start, count)
                    _ring_spread(b, node_rings[m], node_rings[m].index(layout[m][g]), owned, start, intra_ch)
    return b.build()


def _multi_node_alltoall(name: str, topology: Topology, num_nodes: int | None, chunks: int, instances: int,
                         protocol: str, inplace: bool) -> tuple:
    """The checks and builder the multi-node AllToAll programs share: (node layout, builder)."""
    check_common(name, topology, instances=instances, protocol=protocol, chunks=chunks)
    refuse_inplace(name, inplace, "a receiver's output slot still holds data it must forward")
    layout = node_layout(name, topology, num_nodes)
    require_multi_node(name, layout)
    require_contiguous_nodes(name, layout)
    coll = make_collective("alltoall", topology.num_ranks, chunks)
    return layout, new_builder(name, topology, coll, instances=instances, protocol=protocol)


def two_step_alltoall(topology: Topology, *, num_nodes: int | None = None, chunks: int = 1, instances: int = 1,
                      protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllToAll in two steps: gather on the GPU with the destination's local index, then one inter-node
    transfer per (GPU, remote node)."""
    name = "two_step_alltoall"
    layout, b = _multi_node_alltoall(name, topology, num_nodes, chunks, instances, protocol, inplace)
    nodes, gpus = len(layout), len(layout[0])

    def gather_buffer(remote: int) -> str:
        return f"to_node{remote}"

    for m in range(nodes):
        for hop in range(1, nodes):
            remote = (m + hop) % nodes
            for g in range(gpus):  # gather onto (m, g) what node m sends to (remote, g)
                dst = layout[remote][g]
                for src_g, src in enumerate(layout[m]):
                    b.chunk(src, INPUT, dst * chunks, chunks).copy(layout[m][g], gather_buffer(remote),
                                                                    src_g * chunks)
    for m in range(nodes):
        for hop in range(1, nodes):
            remote = (m + hop) % nodes
            for g in range(gpus):  # one inter-node transfer, contiguous in the receiver's output
                first_src = layout[m][0]
                for start, count in pieces(0, gpus * chunks):
                    b.chunk(layout[m][g], gather_buffer(remote), start, count).copy(
                        layout[remote][g], OUTPUT, first_src * chunks + start, ch=1)
    for m in range(nodes):  # blocks that stay in the node
        for src in layout[m]:
            for dst in layout[m]:
                b.chunk(src, INPUT, dst * chunks, chunks).copy(dst, OUTPUT, src * chunks)
    return b.build()


def _gateway(layout: Sequence[Sequence[int]], node: int, remote: int) -> int:
    """The GPU of `node` that carries its traffic with `remote`: the other nodes, in order, take the node's
    GPUs round-robin."""
    gpus = len(layout[node])
    slot = remote if remote < node else remote - 1
    return layout[node][slot % gpus]


def three_step_alltoall(topology: Topology, *, num_nodes: int | None = None, chunks: int = 1, instances: int = 1,
                        protocol: str = "Simple", inplace: bool = False) -> Program:
    """AllToAll in three steps: gather on a gateway GPU per node pair, one bulk inter-node transfer,
    scatter on the receiving node."""
    name = "three_step_alltoall"
    layout, b = _multi_node_alltoall(name, topology, num_nodes, chunks, instances, protocol, inplace)
    nodes, gpus = len(layout), len(layout[0])
    per_src = gpus * chunks  # what one GPU sends to one remote node, contiguous in its input

    def bulk(src_node: int, dst_node: int) -> str:
        return f"bulk{src_node}to{dst_node}"

    # 1. gather: GPU (m, g) sends its blocks for node m' to the gateway, slot g (one contiguous copy).
    for m in range(nodes):
        for hop in range(1, nodes):
            remote = (m + hop) % nodes
            gateway = _gateway(layout, m, remote)
            first_dst = layout[remote][0]
            for g, src in enumerate(layout[m]):
                for start, count in pieces(first_dst * chunks, per_src):
                    b.chunk(src, INPUT, start, count).copy(gateway, bulk(m, remote),
                                                           g * per_src + start - first_dst * chunks)
    # 2. one bulk transfer per ordered node pair, gateway to gateway.
    for m in range(nodes):
        for hop in range(1, nodes):
            remote = (m + hop) % nodes
            src_gw, dst_gw = _gateway(layout, m, remote), _gateway(layout, remote, m)
            for start, count in pieces(0, gpus * per_src):
                b.chunk(src_gw, bulk(m, remote), start, count).copy(dst_gw, bulk(m, remote), start, ch=1)
    # 3. scatter: block (source g, destination g2) goes to output of (remote, g2) at the source's slot.
    for m in range(nodes):
        for hop in range(1, nodes):
            remote = (m + hop) % nodes
            dst_gw = _gateway(layout, remote, m)
            for g, src in enumerate(layout[m]):
                for g2, dst in enumerate(layout[remote]):
                    b.chunk(dst_gw, bulk(m, remote), g * per_src + g2 * chunks, chunks).copy(
                        dst, OUTPUT, src * chunks)
    # Blocks that stay in the node go direct.
    for m in range(nodes):
        for src in layout[m]:
            for dst in layout[m]:
                b.chunk(src, INPUT, dst * chunks, chunks).copy(dst, OUTPUT, src * chunks)
    return b.build()
