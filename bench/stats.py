"""Small, dependency-free statistics for benchmark reports."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95% Wilson score interval of a proportion."""
    if n == 0:
        return (0.0, 0.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def two_proportion_z_test(s1: int, n1: int, s2: int, n2: int) -> tuple[float, float]:
    """Pooled two-sided z-test of p2 != p1: (z, p_value)."""
    if n1 == 0 or n2 == 0:
        return (0.0, 1.0)
    p1, p2 = s1 / n1, s2 / n2
    pooled = (s1 + s2) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    if se == 0:
        return (0.0, 1.0)
    z = (p2 - p1) / se
    p_value = math.erfc(abs(z) / math.sqrt(2))
    return (z, p_value)


def difference_interval(
    s1: int, n1: int, s2: int, n2: int, z: float = 1.959964
) -> tuple[float, float]:
    """95% Wald interval of p2 - p1 (unpooled)."""
    p1, p2 = s1 / n1, s2 / n2
    se = math.sqrt(p1 * (1 - p1) / n1 + p2 * (1 - p2) / n2)
    return (p2 - p1 - z * se, p2 - p1 + z * se)


def mean_interval(values: Sequence[float], z: float = 1.959964) -> tuple[float, float, float]:
    """Mean and its normal-approximation 95% interval."""
    if not values:
        return (0.0, 0.0, 0.0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return (mean, mean, mean)
    half = z * statistics.stdev(values) / math.sqrt(len(values))
    return (mean, mean - half, mean + half)
