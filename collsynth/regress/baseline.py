"""The stored baseline: predicted time per (entry, size) from the last accepted run, per suite.

    {"format": "collsynth.regress-baseline/1", "dtype": "float",
     "entries": {"dgx1/allgather/smt-c1s2r2/Simple": {"suites": ["full", "quick"],
                                                      "times_us": {"1024": 3.21, ...}}, ...}}

Keys name the topology, collective, entry and compile variant, so they stay the same from run to run as
long as the synthesizers find the same points. Updating the baseline for one suite rewrites that suite's
entries and leaves the other suite's alone.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from collsynth.core.errors import CollsynthError
from collsynth.core.files import write_atomic

FORMAT = "collsynth.regress-baseline/1"
BASELINE_PATH = Path(__file__).resolve().parent / "baseline.json"


class BaselineError(CollsynthError):
    """A baseline file that cannot be read (the message says how to regenerate it)."""


@dataclass(frozen=True)
class BaselineEntry:
    suites: frozenset[str]
    times_us: Mapping[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Baseline:
    dtype: str
    entries: Mapping[str, BaselineEntry]

    def for_suite(self, suite: str) -> dict[str, BaselineEntry]:
        return {key: entry for key, entry in self.entries.items() if suite in entry.suites}


def load_baseline(path: str | os.PathLike[str] = BASELINE_PATH) -> Baseline:
    """The baseline at `path`; an empty one when the file does not exist yet."""
    target = Path(path)
    if not target.exists():
        return Baseline(dtype="float", entries={})
    try:
        data = json.loads(target.read_text())
        if data.get("format") != FORMAT:
            raise BaselineError(f"{target}: not a regression baseline (format {data.get('format')!r}); regenerate it "
                                "with `collsynth regress --update-baseline`")
        entries = {str(key): BaselineEntry(frozenset(value.get("suites", [])),
                                           {int(size): float(us) for size, us in value["times_us"].items()})
                   for key, value in data["entries"].items()}
        return Baseline(dtype=str(data.get("dtype", "float")), entries=entries)
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        if isinstance(exc, BaselineError):
            raise
        raise BaselineError(f"{target}: malformed baseline ({exc}); regenerate it with `collsynth regress "
                            "--update-baseline`") from None


def updated_baseline(old: Baseline, suite: str, dtype: str, times: Mapping[str, Mapping[int, float]]) -> Baseline:
    """`old` with `suite`'s entries replaced by `times` (entry key -> size -> us)."""
    entries: dict[str, BaselineEntry] = {}
    for key, entry in old.entries.items():
        suites = entry.suites - {suite}
        if suites and key not in times:
            entries[key] = BaselineEntry(frozenset(suites), entry.times_us)
    for key, per_size in times.items():
        previous = old.entries.get(key)
        suites = (previous.suites if previous else frozenset()) | {suite}
        merged = dict(previous.times_us) if previous else {}
        merged.update(per_size)
        entries[key] = BaselineEntry(frozenset(suites), merged)
    return Baseline(dtype=dtype, entries=dict(sorted(entries.items())))


def save_baseline(baseline: Baseline, path: str | os.PathLike[str] = BASELINE_PATH) -> Path:
    data: dict[str, Any] = {
        "format": FORMAT, "dtype": baseline.dtype,
        "entries": {key: {"suites": sorted(entry.suites),
                          "times_us": {str(size): us for size, us in sorted(entry.times_us.items())}}
                    for key, entry in sorted(baseline.entries.items())},
    }
    target = Path(path)
    if not target.parent.is_dir():
        raise BaselineError(f"cannot write {target}: directory {target.parent} does not exist")
    return write_atomic(target, json.dumps(data, indent=1) + "\n")


def suites_of(baseline: Baseline) -> Iterable[str]:
    return sorted({suite for entry in baseline.entries.values() for suite in entry.suites})
