"""The MILP (TACCL-style) synthesizer: a pipeline of stages as data (`pipeline.py` says how it works).

    from collsynth.synth.milp import synthesize_milp
    result = synthesize_milp(topology, "allgather", sketch, 1 << 20, solver="highs", time_limit=60)
    result.best, result.predicted_us, result.bound, result.stages
"""

from __future__ import annotations

from collsynth.synth.milp.errors import MilpSynthesisError
from collsynth.synth.milp.parameters import DEFAULT_PARAMETERS, MilpParameters
from collsynth.synth.milp.pipeline import synthesize_milp
from collsynth.synth.milp.report import write_report
from collsynth.synth.milp.result import MilpInterrupted, MilpResult

__all__ = ["DEFAULT_PARAMETERS", "MilpInterrupted", "MilpParameters", "MilpResult", "MilpSynthesisError",
           "synthesize_milp", "write_report"]
