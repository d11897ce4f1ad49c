"""A catalog entry that the compiler refuses with its default options is compiled once more unfused and
unpaired (compositions at 64 nodes fit a channel only that way); the options used are recorded."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

import collsynth.compiler as compiler
from collsynth.catalog.pipeline import check_program
from collsynth.catalog.plan import CompileVariant
from collsynth.catalog.sources import build_library_program
from collsynth.core.errors import CollsynthError
from collsynth.topologies import resolve_topology


def _refusing_fused(real: Any, refused: list[dict[str, Any]]) -> Any:
    def compile_program(program: Any, target: Any = None, **options: Any) -> Any:
        if options.get("instr_fusion", True) or options.get("pair_threadblocks", True):
            refused.append(options)
            raise CollsynthError("too many threadblocks on channel 0 (stand-in refusal)")
        return real(program, target, **options)
    return compile_program


def _entry(monkeypatch: pytest.MonkeyPatch, refuse: bool) -> tuple[Any, list[dict[str, Any]]]:
    topology = resolve_topology("ring:4")
    variant = CompileVariant()
    refused: list[dict[str, Any]] = []
    if refuse:
        monkeypatch.setattr(compiler, "compile_program", _refusing_fused(compiler.compile_program, refused))
    entry = check_program("ring_allgather", variant,
                          partial(build_library_program, "ring_allgather", topology, variant), topology,
                          [1024, 1 << 20], "float32")
    return entry, refused


def test_refused_default_falls_back_to_unfused_unpaired(monkeypatch: pytest.MonkeyPatch) -> None:
    entry, refused = _entry(monkeypatch, refuse=True)
    assert refused == [{}]  # the default compile was tried first
    assert entry.passed, entry.message
    assert entry.provenance["compile_options"] == {"instr_fusion": False, "pair_threadblocks": False}


def test_default_compile_records_no_options(monkeypatch: pytest.MonkeyPatch) -> None:
    entry, _ = _entry(monkeypatch, refuse=False)
    assert entry.passed and "compile_options" not in entry.provenance


def test_refused_both_ways_reports_the_default_refusal(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []

    def compile_program(program: Any, target: Any = None, **options: Any) -> Any:
        calls.append(options)
        raise CollsynthError("first refusal" if not options else "second refusal")

    monkeypatch.setattr(compiler, "compile_program", compile_program)
    topology = resolve_topology("ring:4")
    variant = CompileVariant()
    entry = check_program("ring_allgather", variant,
                          partial(build_library_program, "ring_allgather", topology, variant), topology,
                          [1024], "float32")
    assert len(calls) == 2 and not entry.passed
    assert entry.stage == "compile" and entry.message == "first refusal"
