"""The learning experiment's harness: ground truth, scoring, and a small end-to-end run."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from agents.models import Tool
from bench.learning import (
    MIX,
    RunResult,
    Task,
    answer_correct,
    experiment_run,
    paired_comparison,
    tasks_generate,
)
from policies.models import ReflexionProposal
from policies.reflexion import NOT_LEARNABLE
from traces.models import Job

pytestmark = pytest.mark.django_db(transaction=True)


def test_tasks_are_seeded_split_and_carry_ground_truth(small_shop: Any) -> None:
    first = tasks_generate(seed=5, count=30, train_fraction=0.4)
    again = tasks_generate(seed=5, count=30, train_fraction=0.4)
    assert first == again
    assert sum(t.split == "train" for t in first) == 12
    assert {t.kind for t in first} == {
        "order_status",
        "returns",
        "price",
        "compare",
        "stock",
        "policy",
    }
    assert all(t.expected for t in first)
    # Prices and stock are known per SKU (a stock task also knows each SKU's colour/size).
    [price] = [t for t in first if t.kind == "price"][:1]
    assert set(price.expected["amounts"]) == {
        a for values in price.expected["amounts_by_sku"].values() for a in values
    }
    stock = next(t for t in first if t.kind == "stock")
    assert set(stock.expected["variants"]) == set(stock.expected["stock_by_sku"])


@pytest.mark.parametrize(
    ("expected", "status", "answer", "ok"),
    [
        ({"status": "shipped"}, "finished", 'Order #W1 has status "shipped".', True),
        ({"status": "shipped"}, "finished", "Good news: your parcel has Shipped with UPS.", True),
        ({"status": "shipped"}, "fallback", 'Order #W1 has status "shipped".', False),
        ({"status": "shipped"}, "finished", "I could not find it.", False),
        ({"status": "shipped"}, "finished", "It was delivered yesterday.", False),
        # Listing every status states none of them.
        ({"status": "shipped"}, "finished", "It is pending, shipped or delivered.", False),
        ({"status": "shipped"}, "finished", "Your order has not shipped yet.", False),
        (
            {"status": "returned"},
            "finished",
            'Order #W1 has status "returned". It was delivered on May 2.',
            True,
        ),
        ({"eligible": True}, "finished", "Order #W1 is eligible for a return.", True),
        ({"eligible": True}, "finished", "Yes, you can return it until June 3.", True),
        ({"eligible": True}, "finished", "Order #W1 is not eligible for a return.", False),
        ({"eligible": False}, "finished", "Sorry, that order can't be returned.", True),
        ({"eligible": False}, "finished", "This order is ineligible.", True),
        ({"eligible": False}, "finished", "Order #W1 is eligible for a return.", False),
        ({"amounts": [1299.0, 1199.5]}, "finished", "It costs $1,199.50 after discount.", True),
        ({"amounts": [1299.0]}, "finished", "The price is USD 1299.", True),
        ({"amounts": [1299.0]}, "finished", "The price is USD 1399.", False),
        ({"stock_by_sku": {"AB-1234-XX": True}}, "finished", "AB-1234-XX is in stock: 4.", True),
        ({"stock_by_sku": {"AB-1234-XX": False}}, "finished", "AB-1234-XX is in stock: 4.", False),
        (
            {"stock_by_sku": {"AB-1234-XX": False}},
            "finished",
            "AB-1234-XX is currently out of stock.",
            True,
        ),
        (
            {"stock_by_sku": {"AB-1234-XX": False}},
            "finished",
            "Sorry, ab-1234-xx is sold out.",
            True,
        ),
        (
            {"cheaper": "Lamp", "dearer": "Desk"},
            "finished",
            "The Lamp is cheaper than the Desk.",
            True,
        ),
        (
            {"cheaper": "Lamp", "dearer": "Desk"},
            "finished",
            "The desk costs more than the lamp.",
            True,
        ),
        (
            {"cheaper": "Lamp", "dearer": "Desk"},
            "finished",
            "The Desk is $90 and the Lamp $20, so the Lamp costs less.",
            True,
        ),
        (
            {"cheaper": "Lamp", "dearer": "Desk"},
            "finished",
            "The Desk is cheaper than the Lamp.",
            False,
        ),
        (
            {"same_price": ["Lamp", "Desk"]},
            "finished",
            "The Lamp and the Desk cost the same.",
            True,
        ),
        ({"contains_any": ["3-5 business days"]}, "finished", "It takes 3–5 Business Days.", True),
        ({"contains_any": ["3-5 business days"]}, "finished", "It takes a week.", False),
    ],
)
def test_answers_are_scored_against_ground_truth(
    expected: dict, status: str, answer: str, ok: bool
) -> None:
    assert answer_correct(Task("T", "x", "heldout", "q", expected), status, answer) is ok


def test_a_small_experiment_runs_both_arms_and_writes_the_report(
    small_shop: Any, tmp_path: Path, settings: Any
) -> None:
    settings.LLM_BACKEND = "simulated"
    # The sandbox shares this process with six runs at once: on a loaded machine a call can
    # outlast the 3 s default, and a timeout is not what this test is about.
    Tool.objects.update(timeout_seconds=30.0)
    report = experiment_run(
        seed=3,
        tasks_count=24,
        train_fraction=0.5,
        concurrency=6,
        output_dir=tmp_path,
        command="test",
        progress=lambda line: None,
    )
    assert report["arms"]["control"]["heldout"]["n"] == 12
    assert report["arms"]["treatment"]["heldout"]["n"] == 12
    assert report["arms"]["treatment"]["train"]["n"] == 12
    assert 0 <= report["comparison"]["p_value"] <= 1
    # Paired on the same held-out task: the discordant pairs and McNemar's exact p.
    cmp = report["comparison"]
    assert cmp["pairs"] == 12
    assert cmp["mcnemar_b"] + cmp["mcnemar_c"] + cmp["both_ok"] + cmp["both_failed"] == 12
    assert cmp["mcnemar_c"] - cmp["mcnemar_b"] == round(cmp["difference"] * 12)
    assert report["sensitivity"] == []
    assert report["config"]["mix"] == MIX
    assert report["config"]["llm_sim_hint_follow_rate"] == settings.LLM_SIM_HINT_FOLLOW_RATE
    saved = json.loads((tmp_path / "learning-latest.json").read_text())
    assert saved["config"]["llm_backend"] == "simulated"
    markdown = (tmp_path / "learning-latest.md").read_text()
    assert "simulated" in markdown
    assert "task mix: order_status 38%" in markdown
    assert f"simulated hint-follow rate: {settings.LLM_SIM_HINT_FOLLOW_RATE:g}" in markdown
    assert "Exact McNemar test: b = " in markdown
    # the drifted order endpoint was learned as an adapter during training
    [adapter] = [
        s
        for s in report["strategies"]
        if (s["kind"], s["tool"], s["status"]) == ("adapter", "get_order", "active")
    ]
    assert adapter["origin"] == "analyzer:type_mismatch"
    assert adapter["branch"]["transform"] == "digits_to_int"
    # ... and the runtime applied it on every held-out order question of the treatment
    # arm, which stopped hitting the drift, while control (no policy) applied nothing.
    runs = report["runs"]
    control_orders = [r for r in runs["control"] if r["kind"] == "order_status"]
    treated_orders = [r for r in runs["treatment"] if r["kind"] == "order_status"]
    assert control_orders and len(control_orders) == len(treated_orders)
    assert all(r["strategies"] == [] for r in runs["control"])
    assert all("TYPE_MISMATCH" in r["error_types"] for r in control_orders)
    assert all(adapter["id"] in r["strategy_targets"].get("*", []) for r in treated_orders)
    assert not any("TYPE_MISMATCH" in r["error_types"] for r in treated_orders)
    assert adapter["applications"] >= len(treated_orders)
    # so the treatment answers the drifted questions the control cannot
    control_ok = sum(r["success"] for r in control_orders)
    treated_ok = sum(r["success"] for r in treated_orders)
    assert treated_ok > control_ok
    assert report["comparison"]["difference"] > 0
    # Reflexion learned only from failures a branch can fix.
    assert ReflexionProposal.objects.exists()
    assert not ReflexionProposal.objects.filter(error_type__in=NOT_LEARNABLE).exists()
    assert not any(s["error_type"] in NOT_LEARNABLE for s in report["strategies"])
    # Each long piece reported its progress on a Job as it went.
    [bench] = Job.objects.filter(kind=Job.Kind.BENCHMARK)
    assert (bench.status, bench.done, bench.total) == ("finished", 36, 36)
    assert bench.message.startswith("wrote ")
    reflexions = list(Job.objects.filter(kind=Job.Kind.REFLEXION))
    assert reflexions
    assert all(j.status == "finished" and j.done == j.total >= 1 for j in reflexions)
    assert all(j.result_url.startswith("/traces/") for j in reflexions)


def test_the_command_refuses_without_confirmation_or_with_too_few_tasks(db: None) -> None:
    with pytest.raises(CommandError, match="dedicated database"):
        call_command("bench_learning")
    with pytest.raises(CommandError, match="at least 12"):
        call_command("bench_learning", "--yes", "--tasks", "11")


def test_a_small_run_is_allowed_with_a_warning_about_power(
    small_shop: Any, tmp_path: Path, settings: Any
) -> None:
    settings.LLM_BACKEND = "simulated"
    out, err = StringIO(), StringIO()
    call_command(
        "bench_learning",
        "--yes",
        "--tasks",
        "12",
        "--output",
        str(tmp_path),
        stdout=out,
        stderr=err,
    )
    assert "warning: 12 tasks (7 held out) have little statistical power" in err.getvalue()
    assert "held-out success: control" in out.getvalue()
    # By default the headline is repeated at a hint-follow rate of 0.5, on the same tasks.
    assert "at hint-follow 0.5: control" in out.getvalue()
    report = json.loads((tmp_path / "learning-latest.json").read_text())
    assert report["config"]["llm_sim_hint_follow_rate"] == settings.LLM_SIM_HINT_FOLLOW_RATE
    [half] = report["sensitivity"]
    assert half["hint_follow_rate"] == 0.5
    assert half["comparison"]["pairs"] == report["comparison"]["pairs"] == 7
    assert "| 0.5 |" in (tmp_path / "learning-latest.md").read_text()


def test_the_command_sets_the_hint_follow_rate_and_can_skip_the_second_pass(
    small_shop: Any, tmp_path: Path, settings: Any
) -> None:
    settings.LLM_BACKEND = "simulated"
    settings.LLM_SIM_HINT_FOLLOW_RATE = 0.9
    out = StringIO()
    call_command(
        "bench_learning",
        "--yes",
        "--tasks",
        "12",
        "--hint-follow",
        "0.3",
        "--hint-follow-sensitivity",
        "--output",
        str(tmp_path),
        stdout=out,
        stderr=StringIO(),
    )
    report = json.loads((tmp_path / "learning-latest.json").read_text())
    assert report["config"]["llm_sim_hint_follow_rate"] == 0.3
    assert report["sensitivity"] == []
    assert "(hint-follow 0.3)" in out.getvalue()
    # the setting is restored after the run
    assert settings.LLM_SIM_HINT_FOLLOW_RATE == 0.9


def test_a_hint_follow_rate_outside_zero_to_one_is_refused(db: None) -> None:
    with pytest.raises(CommandError, match=r"probability in \[0, 1\], got 1.5"):
        call_command("bench_learning", "--yes", "--tasks", "12", "--hint-follow", "1.5")
    with pytest.raises(ValueError, match=r"probability in \[0, 1\], got -0.1"):
        experiment_run(
            seed=1,
            tasks_count=12,
            train_fraction=0.5,
            concurrency=1,
            output_dir=Path("unused"),
            command="test",
            progress=lambda line: None,
            sensitivity_hint_follow_rates=[-0.1],
        )


def _run(task_id: str, success: bool) -> RunResult:
    return RunResult(
        task_id=task_id, kind="x", trace_id="t", status="finished", success=success, steps=1,
        tool_calls=1, retries=0, latency_ms=1, tokens=1, error_types=[], strategies=[],
        strategy_targets={}, answer="",
    )  # fmt: skip


def test_the_comparison_pairs_runs_by_task_not_by_position() -> None:
    control = [_run("T1", True), _run("T2", False), _run("T3", False), _run("T4", True)]
    # Treatment in another order: T1 broken, T2 and T3 fixed, T4 kept.
    treatment = [_run("T3", True), _run("T4", True), _run("T2", True), _run("T1", False)]
    cmp = paired_comparison(control, treatment)
    assert (cmp["mcnemar_b"], cmp["mcnemar_c"], cmp["both_ok"], cmp["both_failed"]) == (1, 2, 1, 0)
    assert cmp["mcnemar_p"] == 1.0  # 1 vs 2 discordant pairs is no evidence
    assert cmp["difference"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="same held-out tasks"):
        paired_comparison(control, [*treatment[:3], _run("T9", True)])
