"""A whole MILP run keeps to its budget: every stage reads the runner's clock (`synthesize_milp(now=...)`), the
heuristic ones between their steps, the MILP ones for their solver limits.

The clock is fake: it advances one "second" per unit of heuristic work (a schedule evaluation, a greedy
routing, a node of the sketch bounds), so the test counts work and does not depend on the machine's speed.
The solvers' own time is real but does not move the fake clock."""

from __future__ import annotations

import pytest

import collsynth.encodings.milp_bounds as milp_bounds
import collsynth.synth.milp.ordering as ordering
import collsynth.synth.milp.route_stages as route_stages
from collsynth.encodings.sketch import sketch_from_taccl
from collsynth.synth.milp import synthesize_milp
from collsynth.synth.milp.parameters import GREEDY_ROUTING
from collsynth.topologies.taccl import load_taccl_profile
from tests.synth.test_milp_route_stages import NDV2_1MB, SK1_NDV2_N2


class UnitClock:
    """One fake second per unit of heuristic work."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 0.0
        for module, name in ((ordering, "evaluate"), (route_stages, "heuristic_routes"),
                             (milp_bounds, "_entry_budgets")):
            monkeypatch.setattr(module, name, self._counted(getattr(module, name)))

    def __call__(self) -> float:
        return self.now

    def _counted(self, work):
        def counted(*args, **kwargs):
            self.now += 1.0
            return work(*args, **kwargs)
        return counted


def _run(monkeypatch: pytest.MonkeyPatch, time_limit: float | None):
    clock = UnitClock(monkeypatch)
    topo = load_taccl_profile(NDV2_1MB, name="ndv2", num_nodes=2)
    result = synthesize_milp(topo, "allgather", sketch_from_taccl(SK1_NDV2_N2), 64 << 10, solver="highs",
                             time_limit=time_limit, now=clock)
    return result, clock


@pytest.mark.parametrize("budget", [5.0, 20.0])
def test_a_run_ends_within_a_few_units_of_its_budget(monkeypatch, budget):
    # without a budget this run does 1,639 units; its greedy routings and their orderings alone are 25
    result, clock = _run(monkeypatch, budget)
    # past its deadline each later stage does at most its least work (the first routing under the first rule,
    # one ordering rule, a search's first evaluation); a first stage that ignored the clock alone did 25
    assert clock.now <= budget + 8, [(s.name, s.note) for s in result.stages]
    assert result.time_limited and result.seconds == clock.now
    assert any(s.budget_cut for s in result.stages if s.name == GREEDY_ROUTING)
    assert result.predicted_us >= result.lower_bound_us  # a real schedule, verified by the pipeline
