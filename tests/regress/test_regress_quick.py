"""The quick regression suite as CI runs it: real SMT synthesis, lowering, compilation, interpretation and
simulation, judged against the shipped baseline; and SCCL's expected shape on DGX-1 AllGather."""

from __future__ import annotations

from fractions import Fraction

import pytest


@pytest.fixture(scope="module")
def quick_result(quick_regression):
    """`regress(load_suite(quick=True), load_baseline(BASELINE_PATH))`, computed in a worker process started at the
    end of collection (tests/conftest.py), beside the rest of the suite."""
    return quick_regression.result()


def test_quick_suite_passes_against_the_shipped_baseline(quick_result) -> None:
    result = quick_result
    assert not result.failed_items, result.failed_items
    broken = [(e.key, e.message) for e in result.entries if not e.passed]
    assert not broken, broken
    regressions = [str(f) for f in result.regressions]
    assert not regressions, "\n".join(regressions) + "\n(intended? `collsynth regress --quick --update-baseline`)"
    assert result.passed
    # every case the suite promises is there: synthesized and hand-written entries side by side
    cases = {e.case for e in result.entries}
    assert {"dgx1/allgather", "dgx1/reducescatter", "ring:8/allgather", "fully_connected:8/allreduce"} <= cases
    assert {e.name for e in result.entries if e.case == "fully_connected:8/allreduce"} >= {
        "ring_allreduce", "allpairs_allreduce_one_phase"}


def test_dgx1_allgather_frontier_against_the_ring(quick_result) -> None:
    """SCCL's DGX-1 AllGather: Pareto-optimal (2,2,3) and (6,3,7); the latency-optimal point beats the ring
    at small sizes, the bandwidth-optimal one matches or beats it at large sizes."""
    entries = [e for e in quick_result.entries if e.case == "dgx1/allgather"]
    frontier = {(e.chunks, e.steps, e.rounds) for e in entries if e.source == "pareto"}
    assert frontier == {(2, 2, 3), (6, 3, 7)}
    ring = next(e for e in entries if e.name == "ring_allgather")
    latency = min((e for e in entries if e.source == "pareto"), key=lambda e: (e.steps, Fraction(e.rounds, e.chunks)))
    bandwidth = min((e for e in entries if e.source == "pareto"),
                    key=lambda e: (Fraction(e.rounds, e.chunks), e.steps))
    small, large = min(ring.times_us), max(ring.times_us)
    assert latency.times_us[small] < ring.times_us[small]
    assert bandwidth.times_us[large] <= ring.times_us[large] * 1.05
    assert all(check.passed for check in quick_result.shapes)
    assert len(quick_result.shapes) == 2
