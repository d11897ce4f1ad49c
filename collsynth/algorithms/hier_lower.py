"""Lowering a hierarchical composition (collsynth.synth.cluster.hierarchical) with one message per block.

`lower_to_program` emits one op per chunk and leaves it to the compiler's aggregation to merge a link's
contiguous chunks into one transfer; the compiler merges only chunks with the same producer. In a
composition, a block that a phase forwards whole was assembled by the previous phase from several receives
(e.g. the node AllGather of an AllReduce forwards the N sub-blocks the rail phase delivered), so each piece
became its own message: N alphas per hop where the library's programs pay one (their `copy` of a range is
one op whatever wrote it).

`coalesce_transfers` merges runs of consecutive ops of a program that move contiguous slots over one link
(same op, same source rank and buffer, same destination rank and buffer, both ranges adjacent) into one op
of the combined count. It is safe for remote ops: the first op writes only on the destination rank and the
second reads only the source rank's slots (plus, for a reduction, its own destination slots, disjoint from
the first's), so no op of a run reads what an earlier op of the run wrote. `validate_program` re-checks the
merged ops; the compiled IR goes through the reference interpreter like every other before it is written.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from collsynth.language.lower import LoweringError, lower_to_program
from collsynth.language.program import ChunkOp, Program, Slot, validate_program
from collsynth.schedule import Algorithm


def _extends(run: ChunkOp, op: ChunkOp) -> bool:
    """Whether `op` continues `run` on the same link, both ranges adjacent, with no placement hints."""
    return (op.op == run.op and op.src.rank == run.src.rank != run.dst.rank == op.dst.rank
            and op.src.buffer == run.src.buffer and op.dst.buffer == run.dst.buffer
            and op.src.index == run.src.end and op.dst.index == run.dst.end
            and run.sendtb is run.recvtb is run.channel is None
            and op.sendtb is op.recvtb is op.channel is None)


def coalesce_transfers(program: Program) -> Program:
    """`program` with each run of consecutive, contiguous transfers over one link as one op (module doc)."""
    merged: list[ChunkOp] = []
    for op in program.ops:
        if merged and _extends(merged[-1], op):
            run = merged[-1]
            count = run.src.count + op.src.count
            merged[-1] = replace(run, src=Slot(run.src.rank, run.src.buffer, run.src.index, count),
                                 dst=Slot(run.dst.rank, run.dst.buffer, run.dst.index, count))
        else:
            merged.append(op)
    return replace(program, ops=tuple(merged))


def lower_composition(algorithm: Algorithm, **options: Any) -> Program:
    """`lower_to_program(algorithm, **options)` with its transfers coalesced (module docstring)."""
    program = coalesce_transfers(lower_to_program(algorithm, **options))
    validate_program(program)
    return program


GATEWAY_TRANSPOSES = ("receiver", "sender")


def lower_gateway(algorithm: Algorithm, *, transpose: str = "receiver", protocol: str = "Simple",
                  instances: int = 1) -> Program:
    """The gateway AllToAll composition (`synth.cluster.hier_gateway`) as a program whose every transfer is one
    message: each GPU hands the gateway one contiguous block per remote node (source-major), the gateways
    exchange one bulk per node pair, and each GPU of the receiving node gets one contiguous block per remote
    node (destination-major). Source-major to destination-major is a transpose of the node pair's G x G
    blocks, done by local copies on the gateway that receives the bulk (`transpose="receiver"`) or on the one
    that sends it ("sender"); the gateways are the composition's (its bulk step). Local copies occupy only
    their threadblock, where the same reordering through NVLink (one message per block, `lower_composition`)
    queues G times as many messages on every GPU's port."""
    from collsynth.algorithms._common import INPUT, OUTPUT, new_builder, pieces, require_contiguous_nodes
    from collsynth.synth.cluster.hierarchical import groups_of

    if transpose not in GATEWAY_TRANSPOSES:
        raise LoweringError(f"transpose must be one of {', '.join(GATEWAY_TRANSPOSES)}, got {transpose!r}")
    if algorithm.provenance.get("plan") != "gateway":
        raise LoweringError(f"{algorithm.name} is not the gateway composition; lower it with lower_composition")
    topology, coll = algorithm.topology, algorithm.collective
    groups = groups_of(topology)
    require_contiguous_nodes(algorithm.name, groups)
    c, size = coll.chunks, len(groups[0])
    node_of = {rank: m for m, node in enumerate(groups) for rank in node}
    bulks = {(node_of[s.src], node_of[s.dst]): (s.src, s.dst) for s in algorithm.steps[1].sends}
    b = new_builder(algorithm.name, topology, coll, instances=instances, protocol=protocol)
    for m, node in enumerate(groups):
        for hop in range(1, len(groups)):
            r = (m + hop) % len(groups)
            (out, into), far = bulks[(m, r)], groups[r]  # the composition's gateways
            sent, got = f"gather{m}to{r}", f"bulk{m}to{r}"
            for g, s in enumerate(node):  # 1. one block per GPU: what it sends to node r, in destination order
                b.chunk(s, INPUT, far[0] * c, size * c).copy(out, sent, g * size * c)
            if transpose == "sender":
                sent = _transpose(b, out, sent, f"pair{m}to{r}", size, c)
            for start, count in pieces(0, size * size * c):  # 2. the bulk, split at the runtime's count limit
                b.chunk(out, sent, start, count).copy(into, got, start)
            if transpose == "receiver":
                got = _transpose(b, into, got, f"pair{m}to{r}", size, c)
            for g, d in enumerate(far):  # 3. one block per GPU of node r: what node m sends it
                b.chunk(into, got, g * size * c, size * c).copy(d, OUTPUT, node[0] * c)
    for node in groups:  # inside a node: direct
        for s in node:
            for d in node:
                b.chunk(s, INPUT, d * c, c).copy(d, OUTPUT, s * c)
    return b.build()


def _transpose(b: Any, rank: int, buffer: str, into: str, size: int, c: int) -> str:
    """Local copies on `rank`: block (g, g2) of `buffer` (source-major) to (g2, g) of `into`; returns `into`."""
    for g in range(size):
        for g2 in range(size):
            b.chunk(rank, buffer, (g * size + g2) * c, c).copy(rank, into, (g2 * size + g) * c)
    return into


RAIL_GATHER_SOURCES = {"node_source": "direct", "rail_source": "direct"}


def lower_rail_gather(algorithm: Algorithm, *, protocol: str = "Simple", instances: int = 1) -> Program:
    """The node-rail AllToAll composition (direct phases) as a program with one rail message per GPU and remote
    node: the node phase copies each block bound for GPU g of node r into a buffer of the GPU on rail g, at the
    sender's local index, so that what the rail phase forwards to (r, g) is one contiguous range, sent as one
    op (the library's two-step layout). `lower_composition` ships the G blocks of that range as G messages
    (they have G producers, so the compiler does not merge them); on 4xndv4 at 1 GB that leaves the NIC idle
    a quarter of the time (docs/benchmarks.md, lane scale 2026-11-28 night)."""
    from collsynth.algorithms._common import INPUT, OUTPUT, new_builder, pieces, require_contiguous_nodes
    from collsynth.synth.cluster.hierarchical import groups_of

    provenance = algorithm.provenance
    if provenance.get("plan") != "node-rail" or any(provenance.get(k) != v for k, v in RAIL_GATHER_SOURCES.items()):
        raise LoweringError(f"{algorithm.name} is not the node-rail composition of direct phases; lower it with "
                            "lower_composition")
    groups = groups_of(algorithm.topology)
    require_contiguous_nodes(algorithm.name, groups)
    c, size = algorithm.collective.chunks, len(groups[0])
    b = new_builder(algorithm.name, algorithm.topology, algorithm.collective, instances=instances,
                    protocol=protocol)
    for m, node in enumerate(groups):  # 1. node phase: onto (m, g), what node m sends to (r, g)
        for hop in range(1, len(groups)):
            r = (m + hop) % len(groups)
            for g, rail_gpu in enumerate(node):
                for k, s in enumerate(node):
                    b.chunk(s, INPUT, groups[r][g] * c, c).copy(rail_gpu, f"to_node{r}", k * c)
    for m, node in enumerate(groups):  # 2. rail phase: one range per (GPU, remote node)
        for hop in range(1, len(groups)):
            r = (m + hop) % len(groups)
            for g, rail_gpu in enumerate(node):
                for start, count in pieces(0, size * c):
                    b.chunk(rail_gpu, f"to_node{r}", start, count).copy(groups[r][g], OUTPUT, node[0] * c + start,
                                                                           ch=1)
    for node in groups:  # inside a node: direct
        for s in node:
            for d in node:
                b.chunk(s, INPUT, d * c, c).copy(d, OUTPUT, s * c)
    return b.build()
