"""The SMT synthesizers at the edge of their reach: refused before running out of memory, bounded by a whole-run
time limit, and cheap bounds where the flow LP is too large."""

from fractions import Fraction

import pytest

from collsynth.cli import main
from collsynth.collectives import make_collective
from collsynth.core.enums import Status
from collsynth.encodings.bounds import lower_bound_rounds_per_chunk
from collsynth.encodings.cut_bounds import cut_bound_rounds_per_chunk
from collsynth.schedule import verify
from collsynth.synth.least_steps import least_steps
from collsynth.synth.pareto import TIME_LIMIT, pareto_frontier
from collsynth.synth.size import EncodingTooLarge, encoding_fits, rounds_per_chunk_bound
from collsynth.topologies import dgx1, fully_connected, hypercube, resolve_topology, ring, torus


def test_too_large_an_encoding_is_refused_naming_the_scalable_synthesizers():
    topology = torus(16, 16)
    with pytest.raises(EncodingTooLarge, match="synth auto"):
        pareto_frontier(topology, make_collective("allgather", 256))
    with pytest.raises(EncodingTooLarge, match="synth greedy"):
        least_steps(topology, make_collective("allgather", 256))
    assert encoding_fits(dgx1(), make_collective("allgather", 8), 3)


def test_too_large_an_encoding_is_one_line_and_exit_2(cli_runner):
    result = cli_runner.invoke(main, ["synth", "pareto", "torus:16x16", "allgather", "--json"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "synth auto" in lines[0] and "Traceback" not in result.output


def test_a_spent_time_limit_ends_the_sweep_with_what_it_has():
    result = pareto_frontier(dgx1(), make_collective("allgather", 8), total_time_limit=1e-9)
    assert result.stopped == TIME_LIMIT and result.status == Status.TIMEOUT
    assert result.points == () and result.tried == ()


def test_a_time_limit_keeps_the_points_found_before_it():
    seen = []
    full = pareto_frontier(ring(8), make_collective("allgather", 8), time_limit=60)
    result = pareto_frontier(ring(8), make_collective("allgather", 8), time_limit=60, total_time_limit=3600,
                             on_event=lambda kind, payload: seen.append(payload) if kind == "point" else None)
    assert [(p.chunks, p.steps, p.rounds) for p in seen] == [(p.chunks, p.steps, p.rounds) for p in full.points]
    assert result.frontier == full.frontier
    for point in result.points:
        verify(point.algorithm)


def test_least_steps_stops_at_its_deadline():
    # with the deadline already past, no solver call is made and nothing is claimed
    import time

    result = least_steps(dgx1(), make_collective("alltoall", 8), rounds=4, time_limit=60, max_steps=40,
                         deadline=time.perf_counter())
    assert result.status == Status.TIMEOUT and not result.found


@pytest.mark.parametrize(("topology", "chunks", "rounds", "why"), [
    (ring(4), 1, 1, "needs at least 2 steps"),  # the step bound: every step takes a round
    (ring(16), 1, 2, "needs at least 8 steps"),
    (dgx1(), 4, 4, "needs at least 5 rounds"),  # the bandwidth bound: R/C >= 7/6 on dgx1 AllGather
])
def test_least_steps_proves_an_impossible_round_limit_at_once(topology, chunks, rounds, why):
    # issue 16: `least-steps -r R --max-steps 200` refuted every S up to 200 one solver call at a time
    result = least_steps(topology, make_collective("allgather", topology.num_ranks, chunks), rounds=rounds,
                         time_limit=60, max_steps=200)
    assert result.status == Status.UNSAT and not result.tried and why in result.provenance["proof"]


def test_least_steps_tries_no_more_steps_than_rounds():
    result = least_steps(ring(4), make_collective("allgather", 4), rounds=3, max_steps=200)
    assert result.found and max(a.steps for a in result.tried) <= 3


@pytest.mark.parametrize(("topology", "collective"), [
    (ring(6), "allgather"), (dgx1(), "allgather"), (dgx1(), "reducescatter"), (fully_connected(5), "alltoall"),
    (hypercube(3), "allreduce"), (dgx1(), "broadcast"), (resolve_topology("dgx2"), "allgather"),
])
def test_the_cut_bound_is_a_weaker_valid_bound(topology, collective):
    coll = make_collective(collective, topology.num_ranks, root=0 if collective == "broadcast" else None)
    cut = cut_bound_rounds_per_chunk(topology, coll)
    assert 0 < cut <= lower_bound_rounds_per_chunk(topology, coll)


def test_the_flow_lp_stands_where_it_is_small_and_the_cut_bound_beyond():
    assert rounds_per_chunk_bound(ring(8), make_collective("allgather", 8)) == Fraction(7, 2)
    big = torus(8, 8)
    assert rounds_per_chunk_bound(big, make_collective("allgather", 64)) == Fraction(63, 4)  # 63 chunks, 4 in-links
