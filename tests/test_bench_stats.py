"""The statistics behind the learning experiment's report, against known values."""

from __future__ import annotations

import pytest

from bench.stats import (
    difference_interval,
    mcnemar_exact,
    newcombe_interval,
    student_t_two_sided_p,
    summary_variance,
    two_proportion_z_test,
    welch_t_test,
    welch_t_test_samples,
    wilson_interval,
)


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


@pytest.mark.parametrize(
    ("t", "df", "p"),
    # Two-sided critical values from the Student t table.
    [(2.228, 10, 0.05), (12.706, 1, 0.05), (4.032, 5, 0.01), (2.576, 1e7, 0.01), (0.0, 7, 1.0)],
)
def test_student_t_two_sided_p_matches_the_table(t: float, df: float, p: float) -> None:
    assert student_t_two_sided_p(t, df) == pytest.approx(p, abs=2e-4)
    assert student_t_two_sided_p(-t, df) == pytest.approx(p, abs=2e-4)


def test_welch_with_equal_sizes_and_spread_has_pooled_degrees_of_freedom() -> None:
    # Equal n and variance: df = 2(n - 1) and t is the plain difference over its error.
    t, df, p = welch_t_test(1.0, 4.0, 16, 3.0, 4.0, 16)
    assert df == pytest.approx(30.0)
    assert t == pytest.approx(2.0 / (2.0 * (2 / 16) ** 0.5))
    # t = 2.83 on 30 df lies between the table's 2.750 (p = 0.01) and 3.030 (p = 0.005)
    assert 0.005 < p < 0.01


def test_welch_from_samples_equals_welch_from_sql_style_sums() -> None:
    a, b = [0, 1, 3, 0, 2, 1, 0], [0, 0, 1, 0, 0, 1, 0, 0]
    from_samples = welch_t_test_samples(a, b)
    var_a = summary_variance(sum(a), sum(x * x for x in a), len(a))
    var_b = summary_variance(sum(b), sum(x * x for x in b), len(b))
    from_sums = welch_t_test(sum(a) / len(a), var_a, len(a), sum(b) / len(b), var_b, len(b))
    assert from_sums == pytest.approx(from_samples)
    assert from_samples[0] < 0 and 0 < from_samples[2] < 1


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ((1.0, 1.0, 1, 2.0, 1.0, 5), (0.0, 0.0, 1.0)),  # one value says nothing
        ((0.0, 0.0, 9, 0.0, 0.0, 9), (0.0, 0.0, 1.0)),  # no spread, no difference
    ],
)
def test_welch_degenerate_inputs_are_not_significant(args: tuple, expected: tuple) -> None:
    assert welch_t_test(*args) == expected


def test_welch_seed_retries_difference_is_significant() -> None:
    # 2.4 vs 0.9 mean retries (seeds/000 §5.2) with 300 runs per arm and sd 1.5
    t, _, p = welch_t_test(2.4, 2.25, 300, 0.9, 2.25, 300)
    assert t == pytest.approx(-12.25, abs=0.01)
    assert p < 1e-6


def test_newcombe_interval_known_value() -> None:
    # Newcombe (1998), table II example: 56/70 against 48/80, difference 0.2
    low, high = newcombe_interval(48, 80, 56, 70)
    assert low == pytest.approx(0.0524, abs=1e-3)
    assert high == pytest.approx(0.3339, abs=1e-3)


def test_newcombe_interval_stays_open_at_the_extremes() -> None:
    low, high = newcombe_interval(0, 10, 10, 10)
    assert 0.5 < low < 1.0 and high == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("b", "c", "p"),
    [
        # binom.test(2, 12)$p.value in R: 2 * (1 + 12 + 66) / 4096
        (2, 10, 0.0385742187),
        (10, 2, 0.0385742187),
        # all 5 discordant pairs one way: 2 / 2**5
        (0, 5, 0.0625),
        (3, 3, 1.0),
        (0, 1, 1.0),
        # 2 * P(X <= 6) for X ~ Bin(20, 1/2) = 2 * 60460 / 2**20
        (6, 14, 0.1153183),
    ],
)
def test_mcnemar_exact_known_values(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-6)


def test_mcnemar_exact_without_discordant_pairs_says_nothing() -> None:
    assert mcnemar_exact(0, 0) == 1.0


def test_mcnemar_exact_stays_exact_far_in_the_tail() -> None:
    # 76 fixes and no breakage: 2 / 2**76, not a normal approximation.
    assert mcnemar_exact(0, 76) == pytest.approx(2.0**-75, rel=1e-12)
    assert mcnemar_exact(0, 2000) == 0.0  # below the smallest float


@pytest.mark.parametrize(("b", "c"), [(-1, 3), (2, -5)])
def test_mcnemar_exact_refuses_negative_counts(b: int, c: int) -> None:
    with pytest.raises(ValueError, match="counts >= 0"):
        mcnemar_exact(b, c)


def test_mcnemar_exact_refuses_non_integer_counts() -> None:
    with pytest.raises(TypeError, match="integer counts"):
        mcnemar_exact(1.5, 2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="integer counts"):
        mcnemar_exact(True, 2)
