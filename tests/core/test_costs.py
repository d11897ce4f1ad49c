"""The local-step costs follow from memory traffic (core/costs.py's justification): a standalone reduction
moves 3 bytes per payload byte (two reads, one write), a copy 2, as the one step table says; the simulator
charges them from this table."""

from __future__ import annotations

import pytest

from collsynth.core.costs import COPY_BETA_US_PER_MIB, REDUCE_BETA_US_PER_MIB, local_beta
from collsynth.core.enums import StepType
from collsynth.core.steps import STEP_SEMANTICS


def test_reduce_costs_what_its_memory_traffic_says_relative_to_a_copy() -> None:
    copy_traffic = STEP_SEMANTICS[StepType.COPY].traffic
    reduce_traffic = STEP_SEMANTICS[StepType.REDUCE].traffic
    assert (copy_traffic, reduce_traffic) == (2, 3)
    assert pytest.approx(reduce_traffic / copy_traffic) == REDUCE_BETA_US_PER_MIB / COPY_BETA_US_PER_MIB


def test_only_standalone_local_steps_have_a_local_beta() -> None:
    assert local_beta(StepType.COPY) == COPY_BETA_US_PER_MIB
    assert local_beta(StepType.REDUCE) == REDUCE_BETA_US_PER_MIB
    for fused in (StepType.RECV_REDUCE_COPY, StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY_SEND,
                  StepType.SEND, StepType.RECV, StepType.NOP):
        assert local_beta(fused) == 0.0
