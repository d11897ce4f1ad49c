"""The model gate: a synthesized frontier point compiled to more than 1.10x its model cost fails the suite;
the report shows model cost, compiled time and bound side by side."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from test_regress_baseline import entry

from collsynth.regress import MODEL_GATE, RegressResult, model_checks, write_report
from collsynth.synth.report import cost_model
from collsynth.topologies import dgx1

GB = 1 << 30


def model_us(steps: int, rounds: int, chunks: int, size: int) -> float:
    alpha, beta = cost_model(dgx1())
    return steps * alpha + rounds / chunks * size / 8 / (1 << 20) * beta


def result_with(entries) -> RegressResult:
    return RegressResult("t", "float", 0.05, tuple(entries), (), (), {}, (), 0.0, tuple(model_checks(entries)))


def test_gate_compares_tuned_time_with_the_points_model_cost() -> None:
    model = model_us(3, 7, 6, GB)
    fine = entry("smt-c6s3r7", {1024: 50.0, GB: model * 1.5}, source="pareto", shape=(6, 3, 7))
    fine = replace(fine, tuned_us={1024: 1.0, GB: model * 1.02})
    checks = model_checks([fine])
    assert [c.size_bytes for c in checks] == [1024, GB]
    assert all(c.passed and c.tuned for c in checks)
    at_gb = checks[1]
    assert at_gb.model_us == pytest.approx(model)
    assert at_gb.bound_us == pytest.approx(model_us(0, 7, 6, GB))  # the DGX-1 AllGather bound: (R/C)_lb = 7/6
    assert result_with([fine]).passed


def test_point_over_the_gate_fails_the_suite_and_untuned_entries_use_their_own_times() -> None:
    model = model_us(3, 7, 6, GB)
    slow = entry("smt-c6s3r7", {1024: 1.0, GB: model * (MODEL_GATE + 0.05)}, source="pareto", shape=(6, 3, 7))
    checks = model_checks([slow, entry("ring_allgather", {GB: 1.0})])  # library entries are not gated
    assert [(c.size_bytes, c.passed, c.tuned) for c in checks] == [(1024, True, False), (GB, False, False)]
    result = result_with([slow])
    assert not result.passed and result.broken


def test_report_shows_model_compiled_and_bound(tmp_path: Path) -> None:
    model = model_us(3, 7, 6, GB)
    point = replace(entry("smt-c6s3r7", {1024: 3.0, GB: model * 1.2}, source="pareto", shape=(6, 3, 7)),
                    tuned_us={1024: 1.0, GB: model * 1.01})
    write_report(result_with([point]), tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "| model (us) | compiled (us) | ratio | bound (us) |" in text
    assert f"{model:.2f} | {model * 1.01:.2f} | 1.010" in text


def test_switch_steps_count_one_alpha_per_transfer_through_a_port() -> None:
    from collsynth.collectives import make_collective
    from collsynth.regress import port_steps
    from collsynth.schedule import Algorithm, Send, Step
    from collsynth.topologies import dgx2, fully_connected

    # one step, every rank sends its chunk to all 15 peers through its one NVSwitch port: 15 transfers a port
    one_step = Step(15, tuple(Send(r, r, p) for r in range(16) for p in range(16) if p != r))
    switch = Algorithm("ag", dgx2(), make_collective("allgather", 16, 1), (one_step,))
    assert port_steps(switch) == 15
    flat = Algorithm("ag", fully_connected(4), make_collective("allgather", 4, 1),
                     (Step(3, tuple(Send(r, r, p) for r in range(4) for p in range(4) if p != r)),))
    assert port_steps(flat) == 1  # no switch: the model's one alpha per step stands
    # the gate counts the port's alphas: 15 of them at 1KB is the model cost, not one
    alpha = cost_model(dgx2())[0]
    point = replace(entry("smt-c1s1r15", {1024: 15 * alpha, GB: 1e9}, source="pareto", shape=(1, 1, 15)),
                    topology="dgx2", port_steps=15)
    small = next(c for c in model_checks([point]) if c.size_bytes == 1024)
    assert small.model_us == pytest.approx(15 * alpha + 15 * 1024 / 16 / (1 << 20) * cost_model(dgx2())[1])
    assert small.passed
    assert not next(c for c in model_checks([replace(point, port_steps=None)]) if c.size_bytes == 1024).passed
