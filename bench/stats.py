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


def newcombe_interval(
    s1: int, n1: int, s2: int, n2: int, z: float = 1.959964
) -> tuple[float, float]:
    """95% interval of p2 - p1 from the two Wilson intervals (Newcombe's hybrid score
    method): unlike the Wald interval it stays honest at 0% and 100% and small n."""
    if n1 == 0 or n2 == 0:
        return (0.0, 0.0)
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson_interval(s1, n1, z)
    l2, u2 = wilson_interval(s2, n2, z)
    d = p2 - p1
    return (
        d - math.sqrt((p2 - l2) ** 2 + (u1 - p1) ** 2),
        d + math.sqrt((u2 - p2) ** 2 + (p1 - l1) ** 2),
    )


def mean_interval(values: Sequence[float], z: float = 1.959964) -> tuple[float, float, float]:
    """Mean and its normal-approximation 95% interval."""
    if not values:
        return (0.0, 0.0, 0.0)
    mean = statistics.fmean(values)
    if len(values) < 2:
        return (mean, mean, mean)
    half = z * statistics.stdev(values) / math.sqrt(len(values))
    return (mean, mean - half, mean + half)


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    # The fraction converges fast only on one side of the mean; use the symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def student_t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with ``df`` (not necessarily whole) degrees of freedom."""
    if math.isinf(t):
        return 0.0
    if df <= 0 or math.isnan(t):
        return 1.0
    return min(1.0, incomplete_beta(df / 2.0, 0.5, df / (df + t * t)))


def welch_t_test(
    mean1: float, var1: float, n1: int, mean2: float, var2: float, n2: int
) -> tuple[float, float, float]:
    """Welch's two-sided t-test of mean2 != mean1 from summary statistics (sample variances,
    ddof=1): (t, Welch-Satterthwaite degrees of freedom, p_value). Fewer than two values in
    an arm, or no spread and no difference, says nothing: (0, 0, 1)."""
    if n1 < 2 or n2 < 2:
        return (0.0, 0.0, 1.0)
    s1, s2 = var1 / n1, var2 / n2
    se2 = s1 + s2
    if se2 <= 0:
        if mean1 == mean2:
            return (0.0, 0.0, 1.0)
        # Two constant samples that differ: no test needed, and none possible.
        return (math.copysign(math.inf, mean2 - mean1), float(n1 + n2 - 2), 0.0)
    t = (mean2 - mean1) / math.sqrt(se2)
    df = se2 * se2 / ((s1 * s1) / (n1 - 1) + (s2 * s2) / (n2 - 1))
    return (t, df, student_t_two_sided_p(t, df))


def welch_t_test_samples(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float]:
    """Welch's t-test of mean(b) != mean(a) from the two samples themselves."""
    if len(a) < 2 or len(b) < 2:
        return (0.0, 0.0, 1.0)
    return welch_t_test(
        statistics.fmean(a), statistics.variance(a), len(a),
        statistics.fmean(b), statistics.variance(b), len(b),
    )  # fmt: skip


def summary_variance(total: float, total_squares: float, n: int) -> float:
    """Sample variance (ddof=1) from a count, a sum and a sum of squares (SQL aggregates)."""
    if n < 2:
        return 0.0
    return max(0.0, (total_squares - total * total / n) / (n - 1))


def mean_difference_interval(
    mean1: float, var1: float, n1: int, mean2: float, var2: float, n2: int, z: float = 1.959964
) -> tuple[float, float]:
    """Normal-approximation 95% interval of mean2 - mean1 (unpooled)."""
    if n1 == 0 or n2 == 0:
        return (0.0, 0.0)
    half = z * math.sqrt(var1 / n1 + var2 / n2)
    return (mean2 - mean1 - half, mean2 - mean1 + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Exact two-sided McNemar test of paired binary outcomes: the binomial p-value of the
    discordant pairs, ``b`` (control succeeded, treatment failed) against ``c`` (control
    failed, treatment succeeded), under H0 that each discordant pair goes either way with
    probability 1/2. Concordant pairs carry no information. No discordant pair: 1.0."""
    if (
        isinstance(b, bool)
        or isinstance(c, bool)
        or not isinstance(b, int)
        or not isinstance(c, int)
    ):
        raise TypeError(f"mcnemar_exact needs integer counts, got b={b!r}, c={c!r}")
    if b < 0 or c < 0:
        raise ValueError(f"mcnemar_exact needs counts >= 0, got b={b}, c={c}")
    n = b + c
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, k) for k in range(min(b, c) + 1))
    # Exact integer arithmetic, one correctly rounded division (it underflows to 0.0 only
    # when the true value is below ~1e-308).
    return min(1.0, 2 * tail / 2**n)
