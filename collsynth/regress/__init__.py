"""The regression suite: synthesized vs hand-written algorithms, judged against a stored baseline.

    result = regress(load_suite(quick=True), load_baseline())
    print(summary_text(result)); write_report(result, "report/")
"""

from collsynth.regress.baseline import (
    BASELINE_PATH,
    Baseline,
    BaselineEntry,
    BaselineError,
    load_baseline,
    save_baseline,
    updated_baseline,
)
from collsynth.regress.model_gate import MODEL_GATE, ModelCheck, model_checks, port_steps
from collsynth.regress.report import summary_text, write_report
from collsynth.regress.suite import (
    DEFAULT_TOLERANCE,
    EXPECTED_SHAPES,
    CaseEntry,
    Finding,
    Matchup,
    RegressInterrupted,
    RegressResult,
    ShapeCheck,
    compare_with_baseline,
    entry_key,
    evaluate,
    load_suite,
    matchups,
    regress,
    run_suite,
    shape_checks,
)

__all__ = [
    "BASELINE_PATH", "DEFAULT_TOLERANCE", "EXPECTED_SHAPES", "Baseline", "BaselineEntry", "BaselineError", "CaseEntry",
    "Finding", "MODEL_GATE", "Matchup", "ModelCheck", "RegressInterrupted", "RegressResult", "ShapeCheck",
    "compare_with_baseline", "entry_key", "evaluate",
    "load_baseline", "load_suite", "matchups", "model_checks", "port_steps", "regress", "run_suite", "save_baseline",
    "shape_checks",
    "summary_text", "updated_baseline", "write_report",
]
