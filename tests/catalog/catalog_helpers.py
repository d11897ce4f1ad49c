"""Shared pieces for the catalog tests: small plans and hand-made synthesized algorithms (no solver)."""

from __future__ import annotations

import os
import textwrap
import time
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


def processes_with(marker: str) -> list[int]:
    """Other processes whose environment holds `marker` (e.g. this test's PYTEST_CURRENT_TEST value):
    what a build started, orphans included."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "environ").read_bytes():
                    command = (entry / "cmdline").read_bytes()
                    if b"resource_tracker" not in command:  # multiprocessing's per-process singleton
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


def assert_no_processes_left(marker: str, timeout_s: float = 15.0) -> None:
    """Every process carrying `marker` ends within `timeout_s` (children die with their parents)."""
    deadline = time.monotonic() + timeout_s
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = {pid: _command(pid) for pid in processes_with(marker)}
    assert left == {}, f"processes left behind: {left}"


def _command(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"
