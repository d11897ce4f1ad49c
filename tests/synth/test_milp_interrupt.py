"""An interrupt (Ctrl-C, SIGTERM) between two stages of the MILP pipeline keeps the best schedule finished so far,
as one within a stage does (issue 16). The interrupt is raised by a hook at a fixed point between stages, so no
case depends on timing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from collsynth.core.enums import Status
from collsynth.core.signals import Terminated
from collsynth.encodings.sketch import Sketch
from collsynth.schedule import verify
from collsynth.synth.milp import MilpInterrupted, pipeline, synthesize_milp
from collsynth.topologies import ring

INTERRUPTS = [pytest.param(KeyboardInterrupt, id="SIGINT"), pytest.param(Terminated, id="SIGTERM")]
SIZE = 64 * 1024


def interrupted_on_call(real: Callable[..., Any], call: int, kind: type[BaseException]) -> Callable[..., Any]:
    """`real`, except that its `call`-th call (1-based) raises `kind` instead."""
    calls = []

    def hooked(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == call:
            raise kind("signal")
        return real(*args, **kwargs)

    return hooked


def recorded(real: Callable[..., Any], into: list[Any]) -> Callable[..., Any]:
    def hooked(*args: Any, **kwargs: Any) -> Any:
        into.append(result := real(*args, **kwargs))
        return result
    return hooked


def kept(stop: pytest.ExceptionInfo[MilpInterrupted]) -> Any:
    result = stop.value.result
    verify(result.algorithm)
    assert result.status == Status.INTERRUPTED and result.algorithm.provenance["interrupted"] is True
    assert [s.name for s in result.stages][-2:] == ["interrupted", "verify"]
    return result


@pytest.mark.parametrize("kind", INTERRUPTS)
def test_between_routing_and_scheduling_the_ordered_routing_is_kept(monkeypatch, kind) -> None:
    routed: list[Any] = []
    monkeypatch.setattr(pipeline, "route_and_order", recorded(pipeline.route_and_order, routed))
    # the scheduling stage is built right after the routing stages returned: interrupted there
    monkeypatch.setattr(pipeline, "schedule_stage", interrupted_on_call(pipeline.schedule_stage, 1, kind))
    with pytest.raises(MilpInterrupted) as stop:
        synthesize_milp(ring(4), "allgather", Sketch(), SIZE, solver="highs")
    result = kept(stop)
    (best, lower), = routed
    assert result.predicted_us == pytest.approx(best.timing.makespan) and result.lower_bound_us == pytest.approx(lower)
    assert isinstance(stop.value.__context__, kind)


def test_between_the_allreduce_halves_and_its_schedule_the_merged_schedule_is_kept(monkeypatch) -> None:
    # AllReduce: AllGather routed and scheduled (call 1), reversed and merged, then the merged one scheduled (2)
    monkeypatch.setattr(pipeline, "schedule_stage",
                        interrupted_on_call(pipeline.schedule_stage, 2, KeyboardInterrupt))
    with pytest.raises(MilpInterrupted) as stop:
        synthesize_milp(ring(4), "allreduce", Sketch(), SIZE, solver="highs")
    assert kept(stop).algorithm.collective.name == "allreduce"


def test_before_any_schedule_of_the_collective_nothing_is_kept(monkeypatch) -> None:
    # between the AllGather's routing and its schedule there is no AllReduce schedule yet
    monkeypatch.setattr(pipeline, "schedule_stage",
                        interrupted_on_call(pipeline.schedule_stage, 1, KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt) as stop:
        synthesize_milp(ring(4), "allreduce", Sketch(), SIZE, solver="highs")
    assert not isinstance(stop.value, MilpInterrupted)


def test_during_the_final_check_the_final_schedule_is_kept(monkeypatch) -> None:
    finished = synthesize_milp(ring(4), "allgather", Sketch(), SIZE, solver="highs")
    monkeypatch.setattr(pipeline, "verify", interrupted_on_call(pipeline.verify, 1, KeyboardInterrupt))
    with pytest.raises(MilpInterrupted) as stop:
        synthesize_milp(ring(4), "allgather", Sketch(), SIZE, solver="highs")
    result = kept(stop)
    assert result.predicted_us == pytest.approx(finished.predicted_us)
    assert [s.name for s in result.stages].count("verify") == 1
