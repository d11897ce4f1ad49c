"""Size-aware tuning of compile options (AutoCCL-style), evaluated by the simulator or a GPU backend.

space.py: candidates, configurations, the grid; evaluate.py: compile (cached) and time a configuration;
search.py: exhaustive over (algorithm, protocol), coordinate descent over the resources; candidates.py:
the candidates of a (topology, collective); report.py: the tuning report and its plots.
"""

from collsynth.tune.evaluate import BACKENDS, Evaluator, Timing
from collsynth.tune.search import SizeResult, TuneRun, descend, exhaustive_size, tune_size, tune_sizes
from collsynth.tune.space import LIBRARY, MILP, SYNTHESIZED, Candidate, Config, Grid, TuneError

__all__ = [
    "BACKENDS", "LIBRARY", "MILP", "SYNTHESIZED", "Candidate", "Config", "Evaluator", "Grid", "SizeResult",
    "Timing", "TuneError", "TuneRun", "descend", "exhaustive_size", "tune_size", "tune_sizes",
]
