"""validate's one-pass step checks give the verdict of the frozen per-step reference (validate_before.py) on
mutated IRs: the same exception type and message, or both accept."""

from dataclasses import replace

import validate_before
from hypothesis import given, settings
from hypothesis import strategies as st

from collsynth.ir import STEP_TYPES, Algo
from collsynth.ir.validate import validate
from collsynth.runtime import samples

BASES = (samples.allreduce_via_scratch(3), samples.ring_allreduce(5, channels=3),
         samples.ring_allgather(4, inplace=True), samples.pairwise_alltoall(4))
STEP_VALUES = {
    "s": st.integers(-1, 6), "type": st.sampled_from((*STEP_TYPES, "bogus", 3)),
    "srcbuf": st.sampled_from(("i", "o", "s", "x")), "dstbuf": st.sampled_from(("i", "o", "s", "x")),
    "srcoff": st.integers(-2, 12), "dstoff": st.integers(-2, 12), "cnt": st.integers(-1, 80),
    "depid": st.integers(-3, 6), "deps": st.integers(-3, 8), "hasdep": st.booleans(),
}
TB_VALUES = {"send": st.integers(-2, 5), "recv": st.integers(-2, 5), "chan": st.integers(-1, 3),
             "id": st.integers(0, 4)}


def verdict(check, ir: Algo, max_steps: int | None) -> tuple[str, str] | None:
    try:
        check(ir, max_steps_per_tb=max_steps)
    except Exception as error:  # noqa: BLE001 - any exception is part of the verdict
        return type(error).__name__, str(error)
    return None


@st.composite
def mutated(draw) -> Algo:
    ir = draw(st.sampled_from(BASES))
    for _ in range(draw(st.integers(1, 3))):
        g = draw(st.integers(0, len(ir.gpus) - 1))
        tbs = list(ir.gpus[g].tbs)
        t = draw(st.integers(0, len(tbs) - 1))
        if draw(st.booleans()) and tbs[t].steps:
            steps = list(tbs[t].steps)
            k = draw(st.integers(0, len(steps) - 1))
            name = draw(st.sampled_from((*sorted(STEP_VALUES), "dep")))
            if name == "dep":  # a whole dependency, often on the step's own threadblock
                depid = draw(st.one_of(st.just(tbs[t].id), st.integers(-1, len(tbs))))
                steps[k] = replace(steps[k], depid=depid, deps=draw(st.integers(-1, 4)), hasdep=draw(st.booleans()))
            else:
                steps[k] = replace(steps[k], **{name: draw(STEP_VALUES[name])})
            tbs[t] = replace(tbs[t], steps=tuple(steps))
        else:
            name = draw(st.sampled_from(sorted(TB_VALUES)))
            tbs[t] = replace(tbs[t], **{name: draw(TB_VALUES[name])})
        gpus = list(ir.gpus)
        gpus[g] = replace(gpus[g], tbs=tuple(tbs))
        ir = replace(ir, gpus=tuple(gpus))
    return ir


@settings(max_examples=600, deadline=None)
@given(mutated(), st.sampled_from((None, 2, 64)))
def test_same_verdict_as_the_reference(ir, max_steps):
    assert verdict(validate, ir, max_steps) == verdict(validate_before.validate, ir, max_steps)


def test_the_samples_pass_both():
    for ir in BASES:
        assert verdict(validate, ir, None) is None and verdict(validate_before.validate, ir, None) is None
