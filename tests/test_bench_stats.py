"""The statistics behind the learning experiment's report, against known values."""

from __future__ import annotations

import pytest

from bench.stats import difference_interval, two_proportion_z_test, wilson_interval


def test_wilson_interval_known_value() -> None:
    low, high = wilson_interval(81, 100)
    assert low == pytest.approx(0.7222, abs=1e-3)
    assert high == pytest.approx(0.8749, abs=1e-3)


def test_two_proportion_z_test_known_value() -> None:
    # 72.1% vs 89.7% with 300 per arm (the seeds/000 A/B result at that size)
    z, p = two_proportion_z_test(216, 300, 269, 300)
    assert z == pytest.approx(5.49, abs=0.02)
    assert p < 1e-6


def test_equal_proportions_are_not_significant() -> None:
    z, p = two_proportion_z_test(50, 100, 50, 100)
    assert z == 0 and p == pytest.approx(1.0)


def test_difference_interval_contains_the_difference() -> None:
    low, high = difference_interval(60, 100, 80, 100)
    assert low < 0.2 < high
