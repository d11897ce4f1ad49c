"""bench/device_model.py reproduces, from the committed raw GPU output, the fit docs/benchmarks.md quotes."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "bench" / "device_model.py"


@pytest.fixture(scope="module")
def device_model():
    spec = importlib.util.spec_from_file_location("device_model", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["device_model"] = module  # dataclasses look their module up there
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["device_model"]


def test_every_measured_row_is_read_and_the_newest_wins(device_model, tmp_path):
    results = tmp_path / "r.txt"
    results.write_text("AllToAll   all-pairs      1KB    1     64       11.00       0.09\n"
                       "noise\n"
                       "AllToAll   all-pairs      1KB    2    128       10.00       0.09\n"
                       "AllGather  ring           4KB    1      8       24.59       0.16\n")
    rows = device_model.read_rows(results)
    assert [(r.collective, r.size, r.instances, r.us) for r in rows] == [("AllGather", 4096, 1, 24.59),
                                                                           ("AllToAll", 1024, 2, 10.0)]


def test_the_latency_fit_on_the_h200_data(device_model):
    rows = device_model.read_rows(device_model.DEFAULT_RESULTS)
    assert len(rows) == 42
    overhead, alpha, _ = device_model.fit(rows, 8, shared=False)
    # the documented figures: 9.8 us per launch and 2.08 us per message
    assert overhead == pytest.approx(9.82, abs=0.01) and alpha == pytest.approx(2.08, abs=0.01)
    one_instance_ring = next(r for r in rows if r.collective == "AllGather" and r.size == 1024)
    modeled = overhead + device_model.simulated_us(one_instance_ring, 8, alpha, 0.0, shared=False)
    assert modeled == pytest.approx(one_instance_ring.us, rel=0.01)
