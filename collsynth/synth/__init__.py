"""Synthesis: the `Algorithm` schedule IR, its verifier, and the search drivers."""

from collsynth.synth.algorithm import COPY, REDUCE, Algorithm, AlgorithmError, Send, Step
from collsynth.synth.verify import verify

__all__ = ["COPY", "REDUCE", "Algorithm", "AlgorithmError", "Send", "Step", "verify"]
