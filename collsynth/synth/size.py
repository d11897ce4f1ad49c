"""Will the SMT encoding of an instance fit in memory? An estimate from the instance's shape, before anything is
built, so that a too-large instance is refused with a message instead of running out of memory.

The estimate counts literals (a z3 clause or cardinality term costs roughly a fixed amount per literal): the
SCCL encoding has a send variable per (chunk, link, step) and a hold-before-send clause per send over the
sends into its source in earlier steps; the direct AllReduce encoding has contribution variables per
(chunk, rank, step, rank) and no-double-count clauses per (chunk, link, step, rank, other sender)."""

from __future__ import annotations

from fractions import Fraction

from collsynth.collectives import Collective
from collsynth.core.errors import CollsynthError
from collsynth.encodings.bounds import lower_bound_rounds_per_chunk
from collsynth.encodings.cut_bounds import cut_bound_rounds_per_chunk
from collsynth.encodings.sccl_z3 import chunk_destinations
from collsynth.synth.problem import COMPOSED, encodable, strategy
from collsynth.topologies import Topology

# z3 memory per estimated literal. Measured: torus:8x8 AllGather, 1 chunk in 8 steps, 2.6e6 literals estimated,
# took 256 MB to build (hypercube:5: 4.2e5, 35 MB), about 100 bytes a literal; solving and the portfolio's
# symmetry-restricted encodings take as much again and more.
BYTES_PER_LITERAL = 300
# Seconds to build an encoding per estimated literal, measured on the loaded 2-core machine (load average ~24):
# hypercube:6 AllGather, 1 chunk, 6 steps: 3.2e6 literals estimated, 130 s to build (torus:8x8, 8 steps:
# 2.6e6 in 30 s at a lower load). The larger figure: a deadline is better kept than an encoding built.
SECONDS_PER_LITERAL = 4e-5
# Refuse encodings estimated above this much memory (the 2-core CI machines have 4-8 GB for everything).
MAX_ENCODING_BYTES = 3 << 30
# The flow LP for the rounds-per-chunk bound has about (chunk classes x links) columns; above this many (and above
# 16 ranks) the cut bound stands in: the LP of torus:8x8 AllGather (16k columns) took minutes, its cut bound 1 ms.
MAX_LP_COLUMNS = 4096
SCALABLE = "`collsynth synth auto` (or `synth greedy` / `synth trees`)"


class EncodingTooLarge(CollsynthError):
    """The SMT encoding of an instance would not fit in memory; the message names the scalable synthesizers."""


def estimated_literals(topology: Topology, collective: Collective, steps: int) -> int:
    """An estimate (an upper bound on the shape, not a count) of the literals of the instance's encoding with
    the collective's chunks in `steps` steps."""
    n, links = topology.num_ranks, max(1, len(topology.link_list))
    indegree = links / max(1, n)
    if strategy(collective) == COMPOSED:  # the direct AllReduce encoding
        chunks = collective.num_chunks
        return int(chunks * steps * n * (n * indegree * indegree * 4 + links * 4))
    enc_topology, enc_collective = encodable(topology, collective)
    moving = sum(1 for dests in chunk_destinations(enc_collective) if dests)
    sends = moving * links * steps
    return int(sends * (indegree * steps / 2 + 4))


def estimated_build_seconds(topology: Topology, collective: Collective, steps: int) -> float:
    """About how long building the (unrestricted) encoding takes; a deadline check, not a promise."""
    return estimated_literals(topology, collective, steps) * SECONDS_PER_LITERAL


def encoding_fits(topology: Topology, collective: Collective, steps: int) -> bool:
    return estimated_literals(topology, collective, steps) * BYTES_PER_LITERAL <= MAX_ENCODING_BYTES


def check_encodable_size(topology: Topology, collective: Collective, steps: int) -> None:
    """Raise EncodingTooLarge when even the smallest instance (this collective's chunks, `steps` steps) would not
    fit in memory. AllReduce is judged by its halves (the direct encoding is skipped where it does not fit)."""
    if strategy(collective) == COMPOSED:
        from collsynth.synth.problem import allreduce_parts

        collective = allreduce_parts(collective)[1]
    need = estimated_literals(topology, collective, steps) * BYTES_PER_LITERAL
    if need > MAX_ENCODING_BYTES:
        raise EncodingTooLarge(
            f"{collective.name} on {topology.name} ({topology.num_ranks} ranks, {steps} steps) is too large for the "
            f"SMT encoding (about {need / (1 << 30):.1f} GB estimated, limit {MAX_ENCODING_BYTES / (1 << 30):.0f} GB); "
            f"use {SCALABLE}")


def rounds_per_chunk_bound(topology: Topology, collective: Collective) -> Fraction:
    """The flow LP's lower bound on R/C where the LP is small, else the cut bound (weaker, but in milliseconds)."""
    classes = len({(pre, post) for pre, post in zip(collective.pre, collective.post, strict=True) if post - pre}
                  | ({(pre, post) for pre, post in zip(collective.pre, collective.post, strict=True)}
                     if collective.combining else set()))
    if topology.num_ranks <= 16 or classes * len(topology.link_list) <= MAX_LP_COLUMNS:
        return lower_bound_rounds_per_chunk(topology, collective)
    return cut_bound_rounds_per_chunk(topology, collective)
