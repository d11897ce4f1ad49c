"""collsynth: synthesize, compile, verify and run collective-communication algorithms."""

__version__ = "0.1.0"
