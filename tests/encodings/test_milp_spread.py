"""Exact spreading of the last inter-node groups (encodings/milp_spread.py)."""

from types import MappingProxyType

import pytest

from collsynth.collectives import make_collective
from collsynth.encodings.milp_bounds import best_sketch_bound, group_spread_time
from collsynth.encodings.milp_instance import build_instance
from collsynth.encodings.milp_ordering import evaluate
from collsynth.encodings.milp_spread import SpreadProblem, solve_spread, spread_window
from collsynth.encodings.sketch import sketch_from_taccl
from collsynth.encodings.taccl_milp import check_routes, transfers_from_routes
from collsynth.schedule.verify import verify
from collsynth.synth.milp import synthesize_milp
from collsynth.synth.milp.ordering import best_list_schedule, pattern_trials
from collsynth.synth.milp.parameters import GROUP_SPREAD
from collsynth.synth.milp.routing import heuristic_routes
from collsynth.synth.milp.spread import _map_spread, cut_estimate, respread_groups
from collsynth.topologies.taccl import load_taccl_profile

KB = 1 << 10
NDV2_1MB = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
            "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}
SK1_NDV2_N2 = {"nnodes": 2, "intranode_sketch": {"strategy": "none"},
               "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]}},
               "symmetry_offsets": [[8, 16]], "hyperparameters": {"input_chunkup": 1}}
# NDv2 link costs at 64 KB per chunk: NVLink pairs 0.3 + 1.4375, single NVLinks 0.3 + 2.875
DOUBLE, SINGLE = 1.7375, 3.175


def _ndv2(size=64 * KB):
    sketch = sketch_from_taccl(SK1_NDV2_N2)
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    inst = build_instance(topo, make_collective("allgather", topo.num_ranks, sketch.chunkup), sketch, size)
    return topo, sketch, inst


def _window(inst, chunks, entry, ready, busy=None):
    node = inst.node_of(entry)
    inside = [a for a in inst.link_cost if inst.node_of(a[0]) == node and inst.node_of(a[1]) == node]
    return SpreadProblem(
        node=node, chunks=tuple(chunks), entry=(entry,) * len(chunks), ready=tuple(ready),
        targets=tuple(tuple(sorted(d for d in inst.chunks[c].targets if inst.node_of(d) == node and d != entry))
                      for c in chunks),
        arcs_of=tuple(tuple(sorted(a for a in inside if a in inst.chunks[c].arcs and a[1] != entry)) for c in chunks),
        cost=inst.link_cost, budgets=(), busy=MappingProxyType(busy or {}), budget_busy=())


def test_one_chunk_spreads_along_its_shortest_paths():
    """GPU 9 (local 1) reaches local 6 and 7 over a pair and a single NVLink at the earliest: 4.9125 us."""
    _, _, inst = _ndv2()
    spread = solve_spread(_window(inst, [0], 9, [10.0]), "highs", upper=30.0)
    assert spread.status == "optimal" and spread.makespan == pytest.approx(10.0 + DOUBLE + SINGLE)
    assert len(spread.trees[0]) == 7 and {v for _, v in spread.trees[0]} == set(range(8, 16)) - {9}
    # nothing below `upper`: no answer rather than a worse one
    assert solve_spread(_window(inst, [0], 9, [10.0]), "highs", upper=10.0 + DOUBLE + SINGLE - 0.01) is None


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_busy_links_are_left_alone_and_groups_take_longer(solver):
    _, _, inst = _ndv2()
    busy = {(9, 11): ((9.0, 20.0),), (9, 8): ((10.5, 13.0),)}
    spread = solve_spread(_window(inst, [0, 1], 9, [10.0, 10.0], busy), solver, upper=40.0)
    assert spread is not None and spread.status == "optimal"
    for (_, arc), start in spread.starts.items():
        for b, e in busy.get(arc, ()):
            assert start + inst.link_cost[arc] <= b + 1e-6 or start >= e - 1e-6
    # two chunks leave one GPU over its links one at a time: above one chunk's spread, at least the bound
    assert spread.makespan >= 10.0 + group_spread_time(inst, [0, 1], 9, 1) - 1e-6
    assert spread.makespan > 10.0 + DOUBLE + SINGLE + 1e-6


def test_a_symmetric_window_takes_the_mapped_answer():
    _, _, inst = _ndv2()
    routes, _ = heuristic_routes(inst)
    problem = transfers_from_routes(inst, routes)
    orders, _, _ = best_list_schedule(problem)
    trial = next(t for sizes, t in pattern_trials(problem, orders) if sizes == (2, 5, 1))
    timing = evaluate(problem, trial)
    windows = [spread_window(inst, problem, timing, routes, node) for node in (0, 1)]
    # node 1's window is node 0's shifted by 8 ranks (the sketch's symmetry)
    assert windows[0].chunks and windows[1].chunks == tuple(c - 8 for c in windows[0].chunks)
    last = [w.__class__(**{**w.__dict__, **{k: getattr(w, k)[-1:] for k in ("chunks", "entry", "ready", "targets",
                                                                             "arcs_of")}}) for w in windows]
    answer = solve_spread(last[1], "highs", upper=200.0)
    mapped = _map_spread(inst, last[1], answer, last[0])
    assert mapped is not None and mapped[0].makespan == pytest.approx(answer.makespan)
    direct = solve_spread(last[0], "highs", upper=200.0)
    assert direct.makespan == pytest.approx(answer.makespan)
    tree = dict((v, u) for u, v in mapped[0].trees[0])
    assert set(tree) == set(range(0, 8)) - {1}


def test_respread_never_worsens_and_is_deterministic():
    _, _, inst = _ndv2(size=16 * KB)
    routes, _ = heuristic_routes(inst, congestion=True)
    problem = transfers_from_routes(inst, routes)
    orders, timing, _ = best_list_schedule(problem)
    first = respread_groups(inst, routes, problem, orders, solver="highs", max_solves=2)
    second = respread_groups(inst, routes, problem, orders, solver="highs", max_solves=2)
    assert first == second
    # at 16 KB the congestion-aware trees leave a cut whose spread beats the list schedule
    assert first is not None
    assert first.timing.makespan < timing.makespan
    assert check_routes(inst, first.routes) == first.routes
    assert evaluate(first.problem, first.orders) == first.timing


def test_ndv2_two_nodes_64kb_reaches_the_sketch_bound():
    """TE-CCL's setting (64 KB per rank): NIC groups of 1, 6 and 1 chunks (3 alpha + 8 beta = 60.3 us) and
    the six spread so that relay GPU 9's links are free when the last chunk lands, which then takes its
    shortest paths (4.9125 us): 65.2125 us, the last_group_spread bound, so the schedule is optimal in
    the sketch (before, fixed per-chunk trees gave 67.81 us)."""
    topo, sketch, inst = _ndv2()
    bound = best_sketch_bound(inst)
    assert bound.value == pytest.approx(3 * 2.6 + 8 * 6.5625 + DOUBLE + SINGLE)
    result = synthesize_milp(topo, "allgather", sketch, 64 * KB, solver="highs")  # no budget: deterministic
    verify(result.algorithm)
    assert result.predicted_us == pytest.approx(bound.value, abs=1e-6)
    assert result.gap == pytest.approx(0.0, abs=1e-6)
    stage = next(s for s in result.stages if s.name == GROUP_SPREAD)
    assert "improved" in stage.note


def test_cut_estimate_is_below_the_cut_schedule_it_estimates():
    _, _, inst = _ndv2()
    routes, _ = heuristic_routes(inst)
    problem = transfers_from_routes(inst, routes)
    orders, _, _ = best_list_schedule(problem)
    seen = set()
    for sizes, trial in pattern_trials(problem, orders):
        if sizes in ((1, 6, 1), (1, 4, 2, 1)):
            seen.add(sizes)
            timing = evaluate(problem, trial)
            assert cut_estimate(inst, problem, timing, routes) <= timing.makespan + 1e-9
    assert seen == {(1, 6, 1), (1, 4, 2, 1)}


def test_one_chunks_transfers_on_one_out_port_take_turns():
    """One chunk, held at rank 0, goes to 1 and 2 over links of one out-port budget: the two sends
    cannot overlap, so the window takes two link times, not one."""
    arcs = ((0, 1), (0, 2))
    sp = SpreadProblem(node=0, chunks=(0,), entry=(0,), ready=(0.0,), targets=((1, 2),), arcs_of=(arcs,),
                       cost=MappingProxyType({a: 1.0 for a in arcs}), budgets=(frozenset(arcs),),
                       busy=MappingProxyType({}), budget_busy=((),))
    spread = solve_spread(sp, "highs", upper=10.0)
    assert spread.makespan == pytest.approx(2.0)
    first, second = sorted(spread.starts.values())
    assert second >= first + 1.0 - 1e-6
