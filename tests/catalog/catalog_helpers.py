"""Shared pieces for the catalog tests: small plans and hand-made synthesized algorithms (no solver)."""

from __future__ import annotations

import textwrap
from pathlib import Path

from collsynth.catalog import Plan, load_plan
from collsynth.collectives import make_collective
from collsynth.schedule import Algorithm, Send, Step, verify
from collsynth.topologies import resolve_topology

LIBRARY_PLAN = """
name = "small"
sizes = "1KB:1MB"
size_factor = 4
[[targets]]
topology = "fully_connected:4"
collectives = ["allgather", "allreduce"]
"""


def write_plan(tmp_path: Path, text: str = LIBRARY_PLAN, name: str = "plan.toml") -> Plan:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return load_plan(path)


def direct_allgather(num_ranks: int = 4) -> Algorithm:
    """AllGather on fully_connected:n in one step: every rank sends its chunk to every other rank."""
    topology = resolve_topology(f"fully_connected:{num_ranks}")
    collective = make_collective("allgather", num_ranks)
    sends = tuple(Send(src, src, dst) for src in range(num_ranks) for dst in range(num_ranks) if src != dst)
    algorithm = Algorithm("direct", topology, collective, (Step(1, sends),), {"synthesizer": "hand-made"})
    verify(algorithm)
    return algorithm


def broken_allgather(num_ranks: int = 4) -> Algorithm:
    """Like direct_allgather but rank 0's chunk never reaches rank 1 (not verified: it is wrong)."""
    good = direct_allgather(num_ranks)
    sends = tuple(s for s in good.steps[0].sends if (s.src, s.dst) != (0, 1))
    return Algorithm("broken", good.topology, good.collective, (Step(1, sends),), {"synthesizer": "hand-made"})
