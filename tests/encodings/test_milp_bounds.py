"""Combinatorial sketch bounds (encodings/milp_bounds.py), broadcast trees and group patterns."""

import pytest

from collsynth.collectives import make_collective
from collsynth.encodings.milp_bounds import best_sketch_bound, sketch_lower_bounds
from collsynth.encodings.milp_instance import build_instance
from collsynth.encodings.milp_ordering import evaluate
from collsynth.encodings.sketch import Sketch, SwitchSketch
from collsynth.encodings.taccl_milp import transfers_from_routes
from collsynth.synth.milp import synthesize_milp
from collsynth.synth.milp.ordering import RULES, best_list_schedule, greedy_joins, pattern_joins
from collsynth.synth.milp.routing import heuristic_routes
from collsynth.topologies.taccl import load_taccl_profile

MB = 1 << 20
# fully connected nodes (one link class), one NIC per node
DUO = {"name": "duo_1MB", "gpus_per_node": 2, "nics_per_node": 1, "alpha": 0.5, "node_betas_list": [20],
       "node_invbws_list": [20], "remote_alpha": 5.0, "remote_beta": 60.0, "remote_invbw": 65}
QUAD = {"name": "quad_1MB", "gpus_per_node": 4, "nics_per_node": 1, "alpha": 0.5, "node_betas_list": [20],
        "node_invbws_list": [20], "remote_alpha": 5.0, "remote_beta": 60.0, "remote_invbw": 65}
# four GPUs on a switch, two NICs of two GPUs each (a small DGX-2)
SWITCHED = {"name": "sw_1MB", "gpus_per_node": 4, "nics_per_node": 2, "alpha": 0.3, "node_betas_list": [8],
            "node_invbws_list": [8], "remote_alpha": 2.6, "remote_beta": 105, "remote_invbw": 107}


def _switch_sketch(connections, **kw) -> Sketch:
    return Sketch(num_nodes=2, intra_strategy="switch", switches=(SwitchSketch((0, 1, 2, 3), "any"),),
                  inter_strategy="relay", connections=connections, **kw)


CASES = [
    ("duo one pair", DUO, Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 0),)), "allgather", MB),
    ("duo all pairs", DUO, Sketch(num_nodes=2, inter_strategy="relay"), "allgather", MB),
    ("quad one pair", QUAD, Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 1),)), "allgather", MB),
    ("quad small", QUAD, Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 1),)), "allgather", MB // 16),
    ("quad all pairs", QUAD, Sketch(num_nodes=2, inter_strategy="relay"), "allgather", MB),
    ("quad alltoall", QUAD, Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 1),)), "alltoall", MB),
    ("switch direct", SWITCHED, _switch_sketch(((0, 0), (1, 1), (2, 2), (3, 3)),
                                               senders=tuple((g, (g,)) for g in range(4))), "allgather", MB),
    ("switch direct, any sender", SWITCHED, _switch_sketch(((0, 0), (1, 1), (2, 2), (3, 3))), "allgather", MB),
    ("switch one pair per nic", SWITCHED, _switch_sketch(((1, 0), (3, 2))), "allgather", MB),
]


def _instance(profile, sketch, collective, size):
    topo = load_taccl_profile(profile, name=profile["name"], num_nodes=2)
    return topo, build_instance(topo, make_collective(collective, topo.num_ranks, sketch.chunkup), sketch,
                                size / sketch.chunkup)


@pytest.mark.parametrize("label, profile, sketch, collective, size", CASES, ids=[c[0] for c in CASES])
def test_bounds_never_exceed_a_schedule(label, profile, sketch, collective, size):
    """Every bound family stays at or below every schedule the heuristics find for the sketch."""
    _, inst = _instance(profile, sketch, collective, size)
    bounds = sketch_lower_bounds(inst)
    assert bounds, "a two-node instance has at least one sketch bound"
    best = min(_heuristic_makespans(inst))
    for bound in bounds:
        assert bound.value <= best * (1 + 1e-9) + 1e-9, (str(bound), best)


def _heuristic_makespans(inst):
    for kw in ({}, {"congestion": True}, {"fanout": True}, {"min_hops": True}):
        routes, _ = heuristic_routes(inst, **kw)
        problem = transfers_from_routes(inst, routes)
        for rule in RULES:
            orders, timing, _ = best_list_schedule(problem, (rule,))
            yield timing.makespan
            yield greedy_joins(problem, orders)[1].makespan
            yield pattern_joins(problem, orders)[1].makespan


def test_drain_then_spread_is_tight_on_a_hand_case():
    """Two GPUs per node, node 0's only sender GPU 0: GPU 1's chunk first hops to GPU 0 (20.5), the NIC
    carries both chunks (as two transfers from time 0: 2 x 65 = 130, or as one after 20.5: 145.5), and
    the later one still hops inside node 1 (20.5): 150.5 us, which the pipeline reaches."""
    topo, inst = _instance(*CASES[0][1:])
    bound = best_sketch_bound(inst)
    assert bound.family == "drain_then_spread"
    assert bound.value == pytest.approx(150.5)
    result = synthesize_milp(topo, "allgather", CASES[0][2], MB, solver="highs", time_limit=10)
    assert result.predicted_us == pytest.approx(150.5)
    assert result.lower_bound_us == pytest.approx(150.5) and result.gap == pytest.approx(0.0)


def test_late_entries_see_the_nic_order_on_a_switch():
    """Direct-map sketch on a switch with two GPUs per NIC, each GPU sending its own chunk: half the remote
    chunks enter at >= 2 x 107.6 and one GPU behind each NIC must take both through its switch port."""
    topo, inst = _instance(*CASES[6][1:])
    bound = best_sketch_bound(inst)
    assert bound.value == pytest.approx(2 * 107.6 + 2 * 8.3)
    late = [b for b in sketch_lower_bounds(inst) if b.family == "late_entries_behind_one_budget"]
    assert late and late[0].value == pytest.approx(bound.value)
    # without the one-sender-per-chunk map two chunks may share a transfer: that family drops to e_k
    _, loose = _instance(*CASES[7][1:])
    assert max(b.value for b in sketch_lower_bounds(loose) if b.family == "late_entries_behind_one_budget") \
        == pytest.approx(2 * 2.6 + 2 * 105)
    result = synthesize_milp(topo, "allgather", CASES[6][2], MB, solver="highs", time_limit=10)
    assert result.lower_bound_us == pytest.approx(bound.value)
    assert result.predicted_us >= bound.value - 1e-6


def test_one_node_has_no_sketch_bounds():
    topo = load_taccl_profile(QUAD, name="quad", num_nodes=1)
    inst = build_instance(topo, make_collective("allgather", 4), Sketch(), MB)
    assert sketch_lower_bounds(inst) == () and best_sketch_bound(inst) is None


def test_fanout_trees_double_instead_of_fanning_out_from_one_rank():
    """On a switch (one send at a time per port), the greedy broadcast informs 7 ranks in 3 rounds."""
    profile = dict(SWITCHED, gpus_per_node=8, nics_per_node=1)
    topo = load_taccl_profile(profile, name="sw8", num_nodes=1)
    sketch = Sketch(intra_strategy="switch", switches=(SwitchSketch(tuple(range(8)), "any"),))
    inst = build_instance(topo, make_collective("allgather", 8), sketch, MB)
    routes, symmetric = heuristic_routes(inst, fanout=True)
    tree = routes.trees[0]
    children = {}
    for u, v in tree:
        children.setdefault(u, []).append(v)
    assert len(tree) == 7 and len(children[0]) == 3
    problem = transfers_from_routes(inst, routes)
    one = transfers_from_routes(inst, routes.__class__((tree,) + ((),) * 7))
    assert evaluate(one, best_list_schedule(one)[0]).makespan == pytest.approx(3 * 8.3)
    assert best_list_schedule(problem)[1].makespan > 0


def test_pattern_joins_are_never_worse_and_deterministic():
    _, inst = _instance(*CASES[3][1:])
    routes, _ = heuristic_routes(inst, congestion=True)
    problem = transfers_from_routes(inst, routes)
    orders, timing, _ = best_list_schedule(problem)
    first = pattern_joins(problem, orders)
    second = pattern_joins(problem, orders)
    assert first[1].makespan <= min(timing.makespan, greedy_joins(problem, orders)[1].makespan) + 1e-9
    assert first == second
    assert evaluate(problem, first[0]).makespan == pytest.approx(first[1].makespan)


def test_last_group_spread_sees_a_group_that_must_spread_from_one_gpu():
    """Quad, one IB pair: a last IB transfer of several chunks leaves them all at one GPU, whose links send
    one chunk at a time; a last transfer of one chunk costs an extra alpha. The bound weighs both, is
    above drain_then_spread (which charges the spread of one chunk after the fewest transfers), and the
    heuristics reach it."""
    _, inst = _instance(*CASES[2][1:])
    bounds = sketch_lower_bounds(inst)
    last = max(b.value for b in bounds if b.family == "last_group_spread")
    drain = max(b.value for b in bounds if b.family == "drain_then_spread")
    assert last > drain + 1.0
    assert last == pytest.approx(min(_heuristic_makespans(inst)))
