"""Fuzz every input reader through the CLI: exit 2 with one line, or a success that verifies.

The smoke (normal suite) runs ~200 derandomized cases in a few seconds; `pytest -m slow` runs the campaign of
>= 1,000 cases. Both print how many inputs were refused and accepted (`-s` shows it)."""

from __future__ import annotations

import tempfile
from collections import Counter
from pathlib import Path

import pytest
from fuzz_inputs import json_seeds, mutated_json, mutated_plan, mutated_xml, ring_allgather_xml
from fuzz_oracle import judge, judge_sketch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SEEDS = json_seeds()
XML_SEED = ring_allgather_xml()
SMOKE = {"topology": 30, "taccl_profile": 20, "collective": 20, "custom_collective": 15, "algorithm": 30,
         "sketch": 20, "plan": 25, "xml_run": 25, "xml_sim": 15}  # 200 cases
CAMPAIGN_FACTOR = 6  # 1,200 cases under -m slow


def _strategy(kind: str) -> st.SearchStrategy[bytes]:
    if kind == "plan":
        return mutated_plan()
    if kind.startswith("xml"):
        return mutated_xml(XML_SEED)
    return mutated_json(SEEDS[kind])


def _run(kind: str, examples: int) -> Counter:
    if kind not in SEEDS and kind not in ("plan", "xml_run", "xml_sim"):
        pytest.skip(f"no seed for {kind} (shared/examples missing)")
    outcomes: Counter = Counter()
    work = Path(tempfile.mkdtemp(prefix=f"fuzz-{kind}-"))
    xml_seed = work / "seed.xml"
    xml_seed.write_text(XML_SEED)
    suffix = ".toml" if kind == "plan" else ".xml" if kind.startswith("xml") else ".json"

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(data=_strategy(kind))
    def case(data: bytes) -> None:
        path = work / f"input{suffix}"
        path.write_bytes(data)
        outcomes[judge_sketch(path) if kind == "sketch" else judge(kind, path, work, xml_seed)] += 1

    case()
    print(f"fuzz {kind}: {dict(outcomes)}")
    return outcomes


@pytest.mark.parametrize("kind", sorted(SMOKE))
def test_fuzz_smoke(kind: str) -> None:
    outcomes = _run(kind, SMOKE[kind])
    assert outcomes["refused"] > 0  # the mutations reach the validators


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SMOKE))
def test_fuzz_campaign(kind: str) -> None:
    outcomes = _run(kind, SMOKE[kind] * CAMPAIGN_FACTOR)
    assert outcomes["refused"] > 0
