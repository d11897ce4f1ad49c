"""Issue 12's size rules, checked on the source: no source file over 500 lines; no function over 60 lines in
the synthesis stages (synth/, encodings/), where heuristics are pipelines of named stages, not long functions."""

from __future__ import annotations

import ast
from pathlib import Path

import collsynth

PACKAGE = Path(collsynth.__file__).parent
GENERATED = {PACKAGE / "emit" / "chakra_pb2.py"}
MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 60
SHORT_FUNCTION_STAGES = ("synth", "encodings")


def test_no_source_file_is_over_500_lines() -> None:
    long = [f"{p.relative_to(PACKAGE)}: {n}" for p in sorted(PACKAGE.rglob("*.py")) if p not in GENERATED
            and (n := len(p.read_text().splitlines())) > MAX_FILE_LINES]
    assert not long, long


def test_no_function_in_the_synthesis_stages_is_over_60_lines() -> None:
    long = []
    for stage in SHORT_FUNCTION_STAGES:
        for path in sorted((PACKAGE / stage).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    size = (node.end_lineno or node.lineno) - node.lineno + 1
                    if size > MAX_FUNCTION_LINES:
                        long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}: {size} lines")
    assert not long, long
