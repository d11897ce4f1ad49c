"""plan()'s refusals of threadblocks that do not own one side of one connection (collsynth.sim.planning)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sim_irs import send_recv_ir

from collsynth.ir import Algo
from collsynth.sim import SimError
from collsynth.sim.planning import plan
from collsynth.topologies import line

OWN = "give each threadblock its own (peer, channel)"


def _with_tbs(ir: Algo, rank: int, **changes: int) -> Algo:
    """`ir` with every threadblock of `rank` changed as `changes` say (e.g. send=-1, chan=0)."""
    gpus = list(ir.gpus)
    gpus[rank] = replace(gpus[rank], tbs=tuple(replace(tb, **changes) for tb in gpus[rank].tbs))
    return replace(ir, gpus=tuple(gpus))


@pytest.mark.parametrize(("rank", "changes", "message"), [
    (0, {"send": -1}, "IR 'sendrecv' gpu 0 tb 0: has sending steps but send peer -1; set the tb's send peer"),
    (1, {"recv": 5}, "IR 'sendrecv' gpu 1 tb 0: has receiving steps but recv peer 5; set the tb's recv peer"),
    (0, {"chan": 0}, f"IR 'sendrecv' gpu 0 tb 1: shares the send connection 0->1 channel 0 with tb 0; {OWN}"),
    (1, {"chan": 0}, f"IR 'sendrecv' gpu 1 tb 1: shares the receive connection 0->1 channel 0 with tb 0; {OWN}"),
])
def test_plan_names_the_threadblock_and_the_connection_side(rank: int, changes: dict[str, int], message: str) -> None:
    ir = send_recv_ir(channels=2)
    plan(ir, line(2))  # as built, each threadblock owns its side
    with pytest.raises(SimError) as refused:
        plan(_with_tbs(ir, rank, **changes), line(2))
    assert str(refused.value) == message
