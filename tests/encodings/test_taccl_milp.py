"""The MILP encodings: solver layer, routing model, ordering heuristic, scheduling model."""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from collsynth.collectives import make_collective
from collsynth.encodings.milp_instance import build_instance
from collsynth.encodings.milp_model import Lin, MilpModel, at_least, at_most, between, equal
from collsynth.encodings.milp_ordering import (
    Orders,
    ScheduleError,
    ScheduleProblem,
    Transfer,
    evaluate,
)
from collsynth.encodings.milp_schedule_model import build_schedule_model, joins_from_solution, schedule_start
from collsynth.encodings.sketch import Sketch, SwitchSketch
from collsynth.encodings.taccl_milp import (
    Routes,
    build_routing_model,
    routes_from_solution,
    routing_start,
    set_connections_objective,
    set_makespan_objective,
    transfers_from_routes,
)
from collsynth.synth.milp.ordering import RULES, best_list_schedule, greedy_joins, list_schedule
from collsynth.synth.milp.routing import heuristic_routes
from collsynth.topologies import Link, Topology, fully_connected, ring
from collsynth.topologies.taccl import load_taccl_profile

MB = 1 << 20
NDV2 = {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3, "node_betas_list": [23, 46],
        "node_invbws_list": [23, 46], "remote_invbw": 107, "remote_alpha": 2.6, "remote_beta": 105}


# --- solver layer ---------------------------------------------------------------------------------

def _knapsack() -> MilpModel:
    rng = np.random.default_rng(3)
    model = MilpModel("knapsack")
    x = model.add_binaries(40)
    for i in x:
        model.set_cost(i, -float(rng.integers(10, 100)))
    for _ in range(4):
        model.add_row("capacity", list(x), [float(w) for w in rng.integers(5, 40, len(x))], hi=250.0)
    return model


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_both_solvers_agree_and_check_their_answers(solver):
    model = _knapsack()
    result = model.solve(solver)
    assert result.status == "optimal" and result.gap == 0.0
    assert model.violation(result.values) <= 1e-6
    assert result.objective == pytest.approx(model.objective_value(result.values))
    assert result.objective == pytest.approx(_knapsack().solve("highs" if solver == "cbc" else "cbc").objective)


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_infeasible_is_reported(solver):
    model = MilpModel("infeasible")
    x = model.add_binaries(2)
    model.add_row("too_much", list(x), [1.0, 1.0], lo=3.0)
    result = model.solve(solver)
    assert result.status == "infeasible" and not result.has_solution


def test_a_bad_warm_start_is_ignored_and_duplicates_are_summed():
    model = MilpModel("dup")
    x = model.add_columns(1, lb=0.0, ub=10.0, cost=-1.0)
    model.add_row("twice", [x[0], x[0]], [1.0, 1.0], hi=4.0)  # 2 x <= 4
    result = model.solve("highs", warm_start=np.array([9.0]))
    assert result.objective == pytest.approx(-2.0)


# --- instances and routing -------------------------------------------------------------------------

def test_routing_reaches_taccls_objective_on_ndv2():
    # TACCL's routing objective for NDv2 1-node AllGather, 1MB profile: 69 (invbw costs)
    topo = load_taccl_profile(NDV2, name="ndv2", taccl_costs=True)
    inst = build_instance(topo, make_collective("allgather", 8), Sketch(), MB)
    rm = build_routing_model(inst)
    routes, symmetric = heuristic_routes(inst)
    warm = routing_start(inst, rm, routes)
    assert symmetric and rm.model.violation(warm) <= 1e-9
    result = rm.model.solve("highs", warm_start=warm)
    assert result.status == "optimal"
    assert result.objective == pytest.approx(69.0)
    solved = routes_from_solution(inst, rm, result.values)
    assert sum(len(t) for t in solved.trees) == 8 * 7  # every rank receives every chunk exactly once


def _arborescences(n: int, root: int):
    """Every spanning tree of the complete digraph on n ranks directed away from root, as parent maps."""
    others = [v for v in range(n) if v != root]
    for parents in itertools.product(*[[u for u in range(n) if u != v] for v in others]):
        parent = dict(zip(others, parents, strict=True))
        ok = True
        for v in others:
            seen, u = set(), v
            while u != root and ok:
                if u in seen:
                    ok = False
                seen.add(u)
                u = parent[u]
        if ok:
            yield parent


def _all_routings(inst):
    """Per chunk, every spanning tree (as link tuples), with its longest path (4 ranks, all links)."""
    per_chunk = []
    for c in range(len(inst.chunks)):
        options = []
        for parent in _arborescences(4, c):
            tree = tuple(sorted((u, v) for v, u in parent.items()))
            worst = 0.0
            for v in parent:
                t, w = 0.0, v
                while w != c:
                    t += inst.link_cost[(parent[w], w)]
                    w = parent[w]
                worst = max(worst, t)
            options.append((tree, worst))
        per_chunk.append(options)
    return per_chunk


def _relaxation_optimum(inst, per_chunk) -> float:
    """TACCL's routing relaxation, by brute force: min over routings of max(path lengths, link loads)."""
    arcs = sorted(inst.link_cost)
    index = {a: i for i, a in enumerate(arcs)}
    loads = np.zeros((1, len(arcs)))
    paths = np.zeros(1)
    for options in per_chunk:
        vecs = np.zeros((len(options), len(arcs)))
        for k, (tree, _) in enumerate(options):
            for a in tree:
                vecs[k, index[a]] += inst.link_cost[a]
        loads = (loads[:, None, :] + vecs[None, :, :]).reshape(-1, len(arcs))
        paths = np.maximum(paths[:, None], np.array([w for _, w in options])[None, :]).reshape(-1)
    return float(np.min(np.maximum(paths, loads.max(axis=1))))


@given(costs=st.lists(st.integers(1, 9), min_size=12, max_size=12), picks=st.lists(
    st.lists(st.integers(0, 15), min_size=4, max_size=4), min_size=8, max_size=8))
def test_routing_optimum_is_a_lower_bound_for_every_routing(costs, picks):
    # 4 ranks, fully connected, random link costs: the MILP optimum is at least TACCL's relaxation
    # (brute force) and at most the makespan of any schedule, of its own routes or of other routings
    pairs = [(s, d) for s in range(4) for d in range(4) if s != d]
    topo = Topology("rand4", 4, tuple(Link(s, d, 1, 0.0, float(c)) for (s, d), c in zip(pairs, costs, strict=True)))
    inst = build_instance(topo, make_collective("allgather", 4), Sketch(routes="any"), MB)
    rm = build_routing_model(inst)
    result = rm.model.solve("highs")
    assert result.status == "optimal"
    per_chunk = _all_routings(inst)
    assert result.objective >= _relaxation_optimum(inst, per_chunk) - 1e-6
    routes = routes_from_solution(inst, rm, result.values)
    others = [Routes(tuple(per_chunk[c][k][0] for c, k in enumerate(pick))) for pick in picks]
    for candidate in [routes] + others:
        problem = transfers_from_routes(inst, candidate)
        for rule in RULES:
            assert evaluate(problem, list_schedule(problem, rule)).makespan >= result.objective - 1e-6


def test_symmetry_shrinks_the_model_and_keeps_the_optimum():
    topo = ring(8)
    coll = make_collective("allgather", 8)
    plain = build_routing_model(build_instance(topo, coll, Sketch(), MB))
    inst = build_instance(topo, coll, Sketch(symmetry=((1, 8),)), MB)
    sym = build_routing_model(inst)
    assert inst.symmetry.order == 8
    assert sym.model.size().integer_columns * 8 == plain.model.size().integer_columns
    a, b = plain.model.solve("highs"), sym.model.solve("highs")
    assert a.objective == pytest.approx(b.objective)


def test_few_connections_policy_finds_a_ring():
    # 6 ranks on one switch, few connections wanted: as fast as direct sends, with 6 links (a ring)
    topo = fully_connected(6)
    sketch = Sketch(intra_strategy="switch", switches=(SwitchSketch(tuple(range(6)), "min"),), symmetry=((1, 6),))
    inst = build_instance(topo, make_collective("allgather", 6), sketch, 1024)
    rm = build_routing_model(inst)
    set_makespan_objective(rm)
    first = rm.model.solve("highs")
    set_connections_objective(rm, "min", first.objective * (1 + 1e-7))
    second = rm.model.solve("highs")
    assert second.status == "optimal" and second.objective == pytest.approx(6)


# --- ordering and timing -------------------------------------------------------------------------

def _chain_problem() -> ScheduleProblem:
    # 0 -> 1 -> 2 for chunk 0; chunk 1 also crosses 0 -> 1 (shares the link)
    transfers = (Transfer(0, 0, 1), Transfer(0, 1, 2, deps=(0,)), Transfer(1, 0, 1))
    alpha = {(0, 1): 1.0, (1, 2): 1.0}
    beta = {(0, 1): 2.0, (1, 2): 4.0}
    return ScheduleProblem(transfers, alpha, beta, ())


def test_evaluate_is_a_longest_path():
    problem = _chain_problem()
    first = Orders({(0, 1): (0, 2), (1, 2): (1,)}, ())
    timing = evaluate(problem, first)
    assert timing.start == (0.0, 3.0, 3.0) and timing.makespan == 8.0
    other = Orders({(0, 1): (2, 0), (1, 2): (1,)}, ())
    assert evaluate(problem, other).makespan == 11.0
    assert list_schedule(problem, "longest-remaining").links[(0, 1)] == (0, 2)


def test_grouped_transfers_pay_alpha_once():
    transfers = tuple(Transfer(c, 0, 1) for c in range(3))
    problem = ScheduleProblem(transfers, {(0, 1): 5.0}, {(0, 1): 1.0}, (), frozenset({(0, 1)}), 6)
    alone = Orders({(0, 1): (0, 1, 2)}, ())
    assert evaluate(problem, alone).makespan == 18.0
    together = Orders({(0, 1): (0, 1, 2)}, (), frozenset({1, 2}))
    timing = evaluate(problem, together)
    assert timing.makespan == 8.0 and timing.arrival == (8.0, 8.0, 8.0)
    joined, best = greedy_joins(problem, alone)
    assert best.makespan == 8.0 and joined.joins == frozenset({1, 2})


def test_inconsistent_orders_are_detected():
    # the chunk goes 0 -> 1 -> 0, but a budget over both links is ordered the other way round
    transfers = (Transfer(0, 0, 1), Transfer(0, 1, 0, deps=(0,)))
    problem = ScheduleProblem(transfers, {(0, 1): 1.0, (1, 0): 1.0}, {(0, 1): 1.0, (1, 0): 1.0},
                              (frozenset({(0, 1), (1, 0)}),))
    assert evaluate(problem, Orders({(0, 1): (0,), (1, 0): (1,)}, ((0, 1),))).makespan == 4.0
    with pytest.raises(ScheduleError):
        evaluate(problem, Orders({(0, 1): (0,), (1, 0): (1,)}, ((1, 0),)))


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_schedule_lp_equals_evaluation(solver):
    topo = load_taccl_profile(NDV2, name="ndv2")
    inst = build_instance(topo, make_collective("allgather", 8), Sketch(), MB)
    routes, _ = heuristic_routes(inst)
    problem = transfers_from_routes(inst, routes)
    orders, timing, _ = best_list_schedule(problem)
    sm = build_schedule_model(problem, orders, timing.makespan)
    assert not sm.join_col  # one node: an LP
    result = sm.model.solve(solver, warm_start=schedule_start(problem, sm, orders, timing))
    assert result.status == "optimal"
    assert result.objective == pytest.approx(timing.makespan, rel=1e-6)


def test_schedule_milp_joins_inter_node_chunks():
    data = {"name": "pair_1MB", "gpus_per_node": 2, "nics_per_node": 1, "alpha": 0.3,
            "links": [[0, 1], [1, 0]], "betas": [[0, 20], [20, 0]], "invbws": [[0, 20], [20, 0]],
            "remote_alpha": 100.0, "remote_beta": 10.0, "remote_invbw": 110}
    topo = load_taccl_profile(data, name="pair", num_nodes=2)
    sketch = Sketch(num_nodes=2, inter_strategy="relay", connections=((0, 0),))
    inst = build_instance(topo, make_collective("allgather", 4), sketch, MB)
    routes, _ = heuristic_routes(inst)
    problem = transfers_from_routes(inst, routes)
    orders, timing, _ = best_list_schedule(problem)
    sm = build_schedule_model(problem, orders, timing.makespan)
    assert sm.join_col
    result = sm.model.solve("highs", warm_start=schedule_start(problem, sm, orders, timing))
    joined = evaluate(problem, Orders(orders.links, orders.resources, joins_from_solution(sm, result.values)))
    assert joined.makespan == pytest.approx(result.objective)
    assert joined.makespan < timing.makespan  # two chunks cross each IB link, alpha paid once


def test_rows_written_as_expressions_are_the_rows_they_read_as():
    # t >= 2 x + 0.5 and x + y <= 1.5 - y, minimise t with x >= 1: t = 2.5, and the rows are what they say
    model = MilpModel("lin")
    x, y = model.add_columns(2, lb=0.0, ub=10.0)
    t = model.add_columns(1, cost=1.0)[0]
    model.set_bounds(x, 1.0, 10.0)
    model.add_ge("makespan", Lin.of(t), Lin.of(x, 2.0) + 0.5)
    model.add_le("budget", Lin.of(x) + Lin.of(y), Lin.of(y, -1.0) + 1.5)
    assert model.size().families == (("makespan", 1), ("budget", 1))
    result = model.solve("highs")
    assert result.status == "optimal" and result.objective == pytest.approx(2.5)
    assert model.violation(np.array([1.0, 0.5, 2.5])) > 1e-6  # x + 2y = 2 > 1.5
    assert model.violation(np.array([1.0, 0.25, 2.5])) <= 1e-9
    assert (Lin.total([x, x, y]) - Lin.of(y) * 2.0).terms == {x: 2.0, y: -1.0}


def test_two_sided_rows_and_renamed_expressions_read_as_their_bounds():
    # 1 <= x + y <= 1.5 with x = y (an equal row over keys renamed to columns), maximise x: x = y = 0.75
    model = MilpModel("rows")
    x, y = model.add_columns(2, lb=0.0, ub=10.0)
    model.set_cost(x, -1.0)
    assert model.add("pick", between(1.0, Lin.total([x, y]), 1.5)) == 0
    column = {"x": x, "y": y}
    same = equal(Lin.of("x"), Lin.of("y")).renamed(column.__getitem__)
    assert same.terms == {x: 1.0, y: -1.0} and (same.lo, same.hi) == (0.0, 0.0)
    assert model.add("same", same) == 1
    result = model.solve("highs")
    assert result.status == "optimal" and result.objective == pytest.approx(-0.75)
    assert model.violation(np.array([0.4, 0.4])) > 1e-6  # 0.8 < 1
    # terms that meet under a renaming are summed; a constant moves to the bounds
    merged = at_most(Lin.of("a", 2.0) + Lin.of("b", 3.0) + 4.0, 10.0).renamed(lambda key: 0)
    assert merged.terms == {0: 5.0} and merged.hi == 6.0 and merged.lo == -math.inf
    assert at_least(Lin.weighted([(x, 1.0), (y, 2.0), (x, 0.5)]), Lin.of(y)).terms == {x: 1.5, y: 1.0}
