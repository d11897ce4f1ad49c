"""The one step-semantics table (collsynth.core.steps) against the places that cannot import it: the CUDA
kernel's step codes and its send/receive tests, and the IR's spellings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import collsynth.runtime.cuda as cuda_package
from collsynth.core.enums import StepType
from collsynth.core.steps import (
    LOCAL_DST_TYPES,
    LOCAL_SRC_TYPES,
    RECEIVING_TYPES,
    REDUCING_TYPES,
    SENDING_TYPES,
    STEP_SEMANTICS,
    semantics,
)

KERNEL = Path(cuda_package.__file__).parent / "interpreter.cu"
# the kernel's names for the step types (CS_<name>)
KERNEL_NAMES = {"SEND": StepType.SEND, "RECV": StepType.RECV, "RCS": StepType.RECV_COPY_SEND,
                "RRS": StepType.RECV_REDUCE_SEND, "RRC": StepType.RECV_REDUCE_COPY,
                "RRCS": StepType.RECV_REDUCE_COPY_SEND, "CPY": StepType.COPY, "RE": StepType.REDUCE,
                "NOP": StepType.NOP}


def kernel_codes() -> dict[StepType, int]:
    defines = dict(re.findall(r"#define CS_([A-Z]+) (\d+)", KERNEL.read_text()))
    return {step_type: int(defines[name]) for name, step_type in KERNEL_NAMES.items()}


def kernel_predicate(name: str) -> frozenset[StepType]:
    """The step types for which the kernel's `const bool NAME = type == CS_X || ...` holds."""
    match = re.search(rf"const bool {name} = ([^;]+);", KERNEL.read_text())
    assert match, f"the kernel no longer computes {name!r} from the step type"
    return frozenset(KERNEL_NAMES[code] for code in re.findall(r"type == CS_([A-Z]+)", match.group(1)))


def test_every_step_type_has_one_row_and_distinct_kernel_codes() -> None:
    assert set(STEP_SEMANTICS) == set(StepType)
    codes = [sem.code for sem in STEP_SEMANTICS.values()]
    assert sorted(codes) == list(range(len(StepType)))


def test_the_kernel_step_codes_are_the_tables() -> None:
    assert kernel_codes() == {step_type: sem.code for step_type, sem in STEP_SEMANTICS.items()}


def test_the_kernel_sends_and_receives_as_the_table_says() -> None:
    assert kernel_predicate("sends") == SENDING_TYPES
    assert kernel_predicate("receives") == RECEIVING_TYPES


def test_derived_sets_follow_the_msccl_meaning_of_each_step() -> None:
    # s sends its source; r writes what it receives; rrs forwards recv+src without writing; rrc writes recv+src
    assert StepType.SEND in SENDING_TYPES and StepType.SEND in LOCAL_SRC_TYPES and StepType.SEND not in LOCAL_DST_TYPES
    assert StepType.RECV in RECEIVING_TYPES and StepType.RECV in LOCAL_DST_TYPES
    assert StepType.RECV_REDUCE_SEND in REDUCING_TYPES and StepType.RECV_REDUCE_SEND not in LOCAL_DST_TYPES
    assert semantics("rrc").writes_dst and semantics("rrc").reduces and not semantics("rrc").sends
    assert semantics("nop").local and not semantics("nop").traffic
    assert {StepType.RECV_REDUCE_SEND, StepType.RECV_REDUCE_COPY,
                              StepType.RECV_REDUCE_COPY_SEND, StepType.REDUCE} == REDUCING_TYPES


def test_an_unknown_spelling_is_refused() -> None:
    with pytest.raises(ValueError):
        semantics("copy")  # the IR spells a local copy `cpy`
