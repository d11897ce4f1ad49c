"""The MILP synthesis pipeline (collsynth/synth/milp/), its result, report and timeline."""

import json

import pytest

from collsynth.core.enums import Status
from collsynth.encodings.sketch import Sketch, SketchError, SwitchSketch, sketch_from_taccl
from collsynth.schedule import verify
from collsynth.schedule.algorithm import REDUCE, Algorithm
from collsynth.schedule.result import SynthesisResult
from collsynth.synth.milp import MilpSynthesisError, synthesize_milp, write_report
from collsynth.synth.milp.parameters import (
    DEFAULT_PARAMETERS,
    ROUTING_LINKS_MILP,
    ROUTING_MILP,
    SCHEDULE_MILP,
    SKIPPED,
)
from collsynth.synth.milp.runner import Clock
from collsynth.synth.timeline import timeline_text
from collsynth.topologies import fully_connected, ring
from collsynth.topologies.taccl import load_taccl_profile

MB = 1 << 20
NDV2_1MB = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
            "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
NDV2_1KB = {"name": "NDv2_1KB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 30, "node_betas_list": [2.24, 4.50],
            "node_invbws_list": [32.25, 34.50], "remote_alpha": 260, "remote_beta": 10.25, "remote_invbw": 270.25}
# a small two-level machine: 4 GPUs per node in a ring, one NIC per node
QUAD = {"name": "quad_1MB", "gpus_per_node": 4, "nics_per_node": 1, "alpha": 0.5,
        "links": [[0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 1, 0]],
        "betas": [[0, 20, 0, 20], [20, 0, 20, 0], [0, 20, 0, 20], [20, 0, 20, 0]],
        "invbws": [[0, 20, 0, 20], [20, 0, 20, 0], [0, 20, 0, 20], [20, 0, 20, 0]],
        "remote_alpha": 5.0, "remote_beta": 60.0, "remote_invbw": 65}
SK1_NDV2_N1 = {"nnodes": 1, "intranode_sketch": {"strategy": "none"}, "symmetry_offsets": [],
               "hyperparameters": {"input_chunkup": 1}}


def _times(algo: Algorithm):
    return [(s.start_us, s.duration_us) for _, s in algo.sends()]


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_ndv2_allgather_matches_taccl_1mb(solver):
    # TACCL (Gurobi): routing objective 69, final schedule 92, in its invbw cost units
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", taccl_costs=True)
    result = synthesize_milp(topo, "allgather", sketch_from_taccl(SK1_NDV2_N1), MB, solver=solver, time_limit=60)
    routing = next(s for s in result.stages if s.name == ROUTING_MILP)
    assert routing.status == "optimal" and routing.objective == pytest.approx(69.0)
    assert result.lower_bound_us == pytest.approx(69.0)
    assert result.predicted_us <= 92.0 + 1e-6
    # the common result: proven optimal (schedule at the routing bound), bound in us, one verified algorithm
    assert isinstance(result, SynthesisResult) and result.synthesizer == "milp" and result.bound_kind == "time_us"
    assert result.status == Status.OPTIMAL and result.bound == pytest.approx(result.predicted_us)
    assert result.algorithms == (result.best,) and result.algorithm is result.best
    verify(result.algorithm)
    assert all(start is not None and dur > 0 for start, dur in _times(result.algorithm))
    assert max(s + d for s, d in _times(result.algorithm)) == pytest.approx(result.predicted_us)


def test_ndv2_allgather_1kb_is_at_most_taccls():
    # TACCL: 1.00 us (100 in its x100 units)
    topo = load_taccl_profile(NDV2_1KB, name="ndv2", taccl_costs=True)
    result = synthesize_milp(topo, "allgather", sketch_from_taccl(SK1_NDV2_N1), 1024, solver="highs")
    assert result.predicted_us <= 1.00 + 1e-9


def test_allreduce_and_reducescatter_reverse_the_allgather():
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", taccl_costs=True)
    sketch = sketch_from_taccl(SK1_NDV2_N1)
    gather = synthesize_milp(topo, "allgather", sketch, MB, solver="highs")
    scatter = synthesize_milp(topo, "reducescatter", sketch, MB, solver="highs")
    allreduce = synthesize_milp(topo, "allreduce", sketch, MB, solver="highs")
    for result in (scatter, allreduce):
        verify(result.algorithm)
    assert all(s.op == REDUCE for _, s in scatter.algorithm.sends())
    assert scatter.predicted_us == pytest.approx(gather.predicted_us)  # mirror image on a symmetric topology
    # TACCL's AllReduce from this AllGather: ~208 us
    assert allreduce.predicted_us <= 2 * gather.predicted_us + 1e-6 and allreduce.predicted_us <= 208
    ops = {s.op for _, s in allreduce.algorithm.sends()}
    assert ops == {"copy", "reduce"}


@pytest.mark.parametrize("collective", ["alltoall", "broadcast", "reduce", "gather"])
def test_other_collectives_on_small_topologies(collective):
    result = synthesize_milp(ring(4), collective, Sketch(), 64 * 1024, solver="highs", root=1)
    verify(result.algorithm)
    if collective in ("alltoall", "broadcast", "gather"):
        assert result.lower_bound_us is not None and result.lower_bound_us <= result.predicted_us + 1e-9


def test_two_nodes_relay_and_send_together():
    topo = load_taccl_profile(QUAD, name="quad", num_nodes=2)
    sketch = Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 0),), symmetry=((4, 8),))
    result = synthesize_milp(topo, "allgather", sketch, MB, solver="highs", time_limit=60)
    verify(result.algorithm)
    ib = [s for _, s in result.algorithm.sends() if s.src // 4 != s.dst // 4]
    assert {(s.src % 4, s.dst % 4) for s in ib} == {(0, 0)}  # only the sketched connection
    assert len(ib) == 8  # each chunk crosses once
    assert result.gap is not None and result.gap < 0.25
    # sends on one IB link that share a start time went together (alpha paid once)
    starts = [s.start_us for s in ib if s.src == 0]
    schedule = next(s for s in result.stages if s.name.startswith(SCHEDULE_MILP))
    # the scheduling MILP chooses the joins, unless a schedule already at the sketch bound skips it
    assert (schedule.size is not None and schedule.size.integer_columns > 0) or (
        schedule.status == SKIPPED and result.gap == pytest.approx(0.0, abs=1e-6))
    assert len(starts) == 4


SK1_NDV2_TWO_NODES = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
                      "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
                      "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_time_limit_is_the_budget_of_the_whole_run(solver):
    """NDv2 two-node AllToAll: its scheduling MILP alone runs 10-60 s; with a 3 s budget for the whole run
    the result is still a verified schedule with a proven gap, returned in about the budget."""
    import time

    topo = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    budget = 3.0
    started = time.perf_counter()
    result = synthesize_milp(topo, "alltoall", sketch_from_taccl(SK1_NDV2_TWO_NODES), MB, solver=solver,
                             time_limit=budget)
    elapsed = time.perf_counter() - started
    verify(result.algorithm)
    # the limit is enforced (not a speed test: the slack covers a loaded machine and CBC's stop grace)
    assert elapsed < budget + 45
    assert result.lower_bound_us is not None and result.lower_bound_us <= result.predicted_us + 1e-9
    # the scheduling MILP alone needs far more than 3 s, so the budget binds
    assert result.time_limited and result.status == Status.TIMEOUT
    assert "for the whole run" in result.summary()
    assert result.algorithm.provenance["time_limited"] == result.time_limited


def test_a_stage_already_at_the_bound_is_skipped():
    """Two GPUs per node, one IB pair: a greedy schedule meets the sketch bound, so neither MILP runs."""
    duo = {"name": "duo_1MB", "gpus_per_node": 2, "nics_per_node": 1, "alpha": 0.5, "node_betas_list": [20],
           "node_invbws_list": [20], "remote_alpha": 5.0, "remote_beta": 60.0, "remote_invbw": 65}
    topo = load_taccl_profile(duo, name="duo", num_nodes=2)
    sketch = Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 0),))
    result = synthesize_milp(topo, "allgather", sketch, MB, solver="highs", time_limit=30)
    verify(result.algorithm)
    statuses = {s.name: s.status for s in result.stages}
    assert statuses[ROUTING_MILP] == SKIPPED and statuses[SCHEDULE_MILP] == SKIPPED
    assert result.gap == 0.0 and not result.time_limited


def test_switch_sketch_with_few_connections_uses_a_ring():
    sketch = Sketch(intra_strategy="switch", switches=(SwitchSketch(tuple(range(6)), "min"),), symmetry=((1, 6),))
    result = synthesize_milp(fully_connected(6), "allgather", sketch, 1024, solver="highs")
    verify(result.algorithm)
    used = {(s.src, s.dst) for _, s in result.algorithm.sends()}
    assert len(used) == 6


def test_bad_requests_fail_with_one_clear_error():
    with pytest.raises(MilpSynthesisError, match="size"):
        synthesize_milp(ring(4), "allgather", Sketch(), 0)
    with pytest.raises(MilpSynthesisError, match="does not handle"):
        synthesize_milp(ring(4), _custom_combining(), Sketch(), MB, solver="highs")
    with pytest.raises(SketchError, match="nodes"):
        synthesize_milp(ring(4), "allgather", Sketch(num_nodes=2, inter_strategy="relay"), MB)


def _custom_combining():
    from collsynth.collectives import custom_collective

    return custom_collective("sum01", 4, [(0, 0, 0), (0, 1, 0)], [(0, 2, 0)], combining=True)


def test_report_and_timeline(tmp_path):
    topo = load_taccl_profile(NDV2_1MB, name="ndv2")
    result = synthesize_milp(topo, "allgather", sketch_from_taccl(SK1_NDV2_N1), MB, solver="highs")
    files = {p.name for p in write_report(result, tmp_path / "rep")}
    assert files == {"report.md", "timeline.txt", "timeline.png", "algorithm.json", "report.json"}
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "routing MILP" in report and "flow_conservation" in report and "predicted time" in report
    data = json.loads((tmp_path / "rep" / "report.json").read_text())
    assert data["predicted_us"] == pytest.approx(result.predicted_us)
    again = Algorithm.load(tmp_path / "rep" / "algorithm.json")
    verify(again)
    assert _times(again) == _times(result.algorithm)
    text = timeline_text(result.algorithm, width=60)
    assert text.count("|") >= 2 * 8 and "0->1" in text
    assert (tmp_path / "rep" / "timeline.png").read_bytes()[:4] == b"\x89PNG"


# --- bench-sized cases (pytest -m slow) -------------------------------------------------------------

DGX2_1KB = {"name": "DGX2_1KB", "gpus_per_node": 16, "nics_per_node": 8, "alpha": 30, "node_betas_list": [1],
            "node_invbws_list": [31], "remote_invbw": 270, "remote_alpha": 260, "remote_beta": 10.25}
SK1_DGX2_N1 = {"nnodes": 1, "intranode_sketch": {"strategy": "switch", "switches": [list(range(16))],
                                                 "switch_hyperedge_strategy": ["uc-min"]},
               "symmetry_offsets": [[2, 16]], "hyperparameters": {"input_chunkup": 1}}
SK1_NDV2_N2 = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
               "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
               "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_dgx2_one_node_matches_taccls_objective(solver):
    # TACCL: 465.16 in x100 units = 4.65 us makespan + 0.01 x 16 distinct links (a ring)
    topo = load_taccl_profile(DGX2_1KB, name="dgx2", taccl_costs=True)
    result = synthesize_milp(topo, "allgather", sketch_from_taccl(SK1_DGX2_N1), 1024, solver=solver, time_limit=60)
    routing = next(s for s in result.stages if s.name == ROUTING_MILP)
    links = next(s for s in result.stages if s.name == ROUTING_LINKS_MILP)
    assert routing.objective == pytest.approx(4.65) and routing.status == "optimal"
    assert links.objective == pytest.approx(16) and links.status == "optimal"
    assert result.predicted_us == pytest.approx(4.65)
    verify(result.algorithm)


@pytest.mark.slow
@pytest.mark.parametrize("solver", ["highs", "cbc"])
@pytest.mark.parametrize("collective", ["allgather", "alltoall"])
def test_ndv2_two_nodes_close_to_the_bound(solver, collective):
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    result = synthesize_milp(topo, collective, sketch_from_taccl(SK1_NDV2_N2), MB, solver=solver, time_limit=60)
    routing = next(s for s in result.stages if s.name == ROUTING_MILP)
    assert routing.gap is not None and routing.gap <= 0.02
    assert result.gap is not None and result.gap <= 0.02
    verify(result.algorithm)


def test_a_spent_budget_skips_later_milp_stages():
    """Clock.spent: a stage that cannot have min_stage_seconds before its reserve (CBC's stop grace
    included) is skipped, while the routing MILP's limit still gets the minimum. The clock reads an
    injected time, so nothing here waits or depends on the machine's speed."""
    minimum = DEFAULT_PARAMETERS.min_stage_seconds

    def clock(elapsed: float, total: float | None, grace: float = 0.0) -> Clock:
        return Clock(100.0, total, grace, minimum, now=lambda: 100.0 + elapsed)

    assert clock(0.0, 10.0).spent(0.03) is False
    assert clock(0.0, 10.0, grace=6.0).spent(0.5) is True  # 5 s left less 6 s of CBC grace
    assert clock(20.0, 10.0).spent(0.0) is True
    assert clock(20.0, 10.0).stage_limit(0.0) == minimum
    assert clock(2.0, 10.0).stage_limit(0.25) == pytest.approx(10.0 - 2.0 - 2.5)
    assert clock(0.0, None, grace=6.0).spent(0.5) is False and clock(0.0, None).stage_limit(0.5) is None
    assert clock(7.0, 10.0).deadline(0.25) == pytest.approx(107.5) and not clock(7.0, 10.0).past(107.5)
    assert clock(8.0, 10.0).past(107.5)
