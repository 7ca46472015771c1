"""Property-based tests of rollout bucketing and the verdict arithmetic (no database)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.rollout_stats import (
    ArmStats,
    RolloutRules,
    normal_cdf,
    normal_quantile,
    percentile,
    rate_difference_interval,
    rollout_bucket,
    rollout_judge,
    rollout_routes_canary,
    routing_key,
    schedule_next,
    two_proportion_z,
)

ids = st.text(
    alphabet=st.characters(min_codepoint=33, max_codepoint=0x2FFF), min_size=1, max_size=24
)
SESSIONS = 4000


@settings(max_examples=60, deadline=None)
@given(
    rollout_id=st.integers(min_value=1, max_value=10**6),
    percent=st.sampled_from([1, 5, 10, 25, 50, 75, 100]),
    salt=st.text(min_size=0, max_size=8),
)
def test_the_split_stays_within_tolerance_of_the_target(
    rollout_id: int, percent: int, salt: str
) -> None:
    keys = [routing_key(session_id=f"{salt}-{i}") for i in range(SESSIONS)]
    share = sum(
        rollout_routes_canary(rollout_id=rollout_id, key=key, percent=percent) for key in keys
    ) / len(keys)
    p = percent / 100
    # five standard errors of a binomial share: a fair hash fails this about once in 3.5 million
    tolerance = 5 * math.sqrt(p * (1 - p) / SESSIONS) + 1e-9
    assert abs(share - p) <= tolerance


@given(rollout_id=st.integers(min_value=1), session=ids, percent=st.integers(0, 100))
def test_a_session_always_lands_in_the_same_bucket(
    rollout_id: int, session: str, percent: int
) -> None:
    key = routing_key(session_id=session)
    first = rollout_bucket(rollout_id=rollout_id, key=key)
    assert 0 <= first < 10_000
    assert all(rollout_bucket(rollout_id=rollout_id, key=key) == first for _ in range(3))
    assert rollout_routes_canary(rollout_id=rollout_id, key=key, percent=percent) == (
        first < percent * 100
    )


@given(
    rollout_id=st.integers(min_value=1),
    session=ids,
    low=st.integers(0, 100),
    high=st.integers(0, 100),
)
def test_raising_the_percentage_only_adds_sessions(
    rollout_id: int, session: str, low: int, high: int
) -> None:
    low, high = sorted((low, high))
    key = routing_key(session_id=session)
    if rollout_routes_canary(rollout_id=rollout_id, key=key, percent=low):
        assert rollout_routes_canary(rollout_id=rollout_id, key=key, percent=high)


@given(customer=ids, session=ids)
def test_a_customer_id_wins_over_the_session(customer: str, session: str) -> None:
    assert routing_key(customer_id=customer, session_id=session) == routing_key(
        customer_id=customer, session_id="another"
    )


@given(
    x1=st.integers(0, 500),
    extra1=st.integers(0, 500),
    x2=st.integers(0, 500),
    extra2=st.integers(0, 500),
)
def test_the_z_statistic_is_antisymmetric_and_its_sign_follows_the_rates(
    x1: int, extra1: int, x2: int, extra2: int
) -> None:
    n1, n2 = x1 + extra1, x2 + extra2
    z = two_proportion_z(x1=x1, n1=n1, x2=x2, n2=n2)
    assert z == -two_proportion_z(x1=x2, n1=n2, x2=x1, n2=n1)
    if n1 and n2 and x1 / n1 > x2 / n2 and z:
        assert z > 0


def test_known_values() -> None:
    # 10/100 vs 20/100: pooled 0.15, se = sqrt(.15 * .85 * .02) = 0.0505
    assert two_proportion_z(x1=10, n1=100, x2=20, n2=100) == (-0.1 / math.sqrt(0.15 * 0.85 * 0.02))
    assert abs(normal_cdf(-1.959964) - 0.025) < 1e-6
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([], 95) is None
    assert schedule_next([1, 5, 25, 50, 100], 5) == 25
    assert schedule_next([1, 5, 25, 50, 100], 60) == 100


@given(
    n=st.integers(0, 60),
    errors=st.integers(0, 60),
    stable_n=st.integers(0, 400),
)
def test_no_verdict_moves_a_rollout_below_min_samples_without_a_burst(
    n: int, errors: int, stable_n: int
) -> None:
    rules = RolloutRules(min_samples=100, burst=10**6)
    canary = ArmStats(n=n, errors=min(errors, n))
    stable = ArmStats(n=stable_n, errors=stable_n // 3)
    assert rollout_judge(canary=canary, stable=stable, rules=rules).action == "wait"


def test_promotion_needs_a_20_percent_relative_improvement_even_when_significant() -> None:
    rules = RolloutRules(min_samples=10, latency_min_samples=10)
    stable = ArmStats(n=100_000, errors=20_000, p95_ms=100)
    better_by_10 = ArmStats(n=50_000, errors=9_000, p95_ms=100)
    better_by_30 = ArmStats(n=50_000, errors=7_000, p95_ms=100)
    assert rollout_judge(canary=better_by_10, stable=stable, rules=rules).action == "hold"
    assert rollout_judge(canary=better_by_30, stable=stable, rules=rules).action == "promote"
    slower = ArmStats(n=50_000, errors=7_000, p95_ms=200)
    assert rollout_judge(canary=slower, stable=stable, rules=rules).action == "rollback"


@pytest.mark.parametrize(("p", "z"), [(0.975, 1.959964), (0.95, 1.644854), (0.5, 0.0)])
def test_the_normal_quantile_inverts_the_cdf(p: float, z: float) -> None:
    assert normal_quantile(p) == pytest.approx(z, abs=1e-6)
    assert normal_cdf(normal_quantile(p)) == pytest.approx(p, abs=1e-9)


@given(st.integers(0, 500), st.integers(1, 500), st.integers(0, 500), st.integers(1, 500))
@settings(max_examples=200, deadline=None)
def test_the_rate_difference_interval_holds_the_difference_and_narrows_with_runs(
    x1: int, n1: int, x2: int, n2: int
) -> None:
    x1, x2 = min(x1, n1), min(x2, n2)
    result = rate_difference_interval(x1=x1, n1=n1, x2=x2, n2=n2, alpha=0.05)
    assert result is not None
    diff, low, high = result
    assert low <= diff <= high and diff == pytest.approx(x1 / n1 - x2 / n2)
    tenfold = rate_difference_interval(x1=10 * x1, n1=10 * n1, x2=10 * x2, n2=10 * n2, alpha=0.05)
    assert tenfold is not None and tenfold[2] - tenfold[1] <= high - low + 1e-12
    assert rate_difference_interval(x1=0, n1=0, x2=x2, n2=n2, alpha=0.05) is None
