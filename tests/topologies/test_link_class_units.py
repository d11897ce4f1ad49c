"""The built-in link classes' betas are microseconds per MiB, derived consistently from the measured classes."""

import pytest

from collsynth.topologies import library
from collsynth.topologies.library import (
    IB_EDR,
    IB_EFFICIENCY,
    IB_HDR,
    IB_NDR,
    NVLINK_EFFICIENCY,
    NVLINK_V100,
    NVSWITCH_A100,
    NVSWITCH_H100,
    XGMI_MI50,
    XGMI_MI300X,
)


def test_peak_beta_is_microseconds_per_mib():
    # 1 GB/s = 1000 bytes per microsecond, so one MiB takes 1048.576 us
    assert library.peak_beta_us_per_mib(1.0) == pytest.approx(2**20 / 1000)
    assert library.peak_beta_us_per_mib(300.0) == pytest.approx(2**20 / 300_000)


def test_the_derivation_reproduces_the_measured_classes_from_their_own_peaks():
    # the efficiency and the derived betas share one unit: a measured class is its own fixed point
    assert library._beta_us_per_mb(25.0, NVLINK_EFFICIENCY) == pytest.approx(NVLINK_V100.beta_us_per_mb)
    assert library._beta_us_per_mb(12.5, IB_EFFICIENCY) == pytest.approx(IB_EDR.beta_us_per_mb)


@pytest.mark.parametrize(("cls", "peak", "measured", "measured_peak"), [
    (NVSWITCH_A100, 300, NVLINK_V100, 25), (NVSWITCH_H100, 450, NVLINK_V100, 25), (XGMI_MI50, 50, NVLINK_V100, 25),
    (XGMI_MI300X, 64, NVLINK_V100, 25), (IB_HDR, 25, IB_EDR, 12.5), (IB_NDR, 50, IB_EDR, 12.5)])
def test_derived_beta_scales_the_measured_one_by_the_peak_ratio(cls, peak, measured, measured_peak):
    assert cls.beta_us_per_mb == pytest.approx(measured.beta_us_per_mb * measured_peak / peak, abs=5e-4)
