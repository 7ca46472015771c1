"""Ops read the policy tree, compare two versions and watch a job's progress; an admin reads
the audit log. Against the app served by bin/serve, in each deployment shape."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import screenshot
from tests.browser.test_chat_flow import login
from tests.served import ServedApp

pytestmark = [pytest.mark.browser, pytest.mark.served]

# Rules that change nothing on the happy path the other browser tests walk.
FIRST = """\
version: 1
parent: null
scopes:
- tool: get_order
  intent: ''
  error_handlers:
  - error_type: INTERNAL_SERVER_ERROR
    root_cause: the orders service answers 500 under load
    strategy_update: serve cached order data instead of failing
    branch:
      tool: get_order
      on: INTERNAL_SERVER_ERROR
      action: degrade_cache
"""
ADDED_SCOPE = """\
- tool: search_products
  intent: ''
  validation_rules:
  - error_type: MISSING_REQUIRED_FIELD
    root_cause: search was called without a query
    strategy_update: always pass a query to search_products
    branch:
      tool: search_products
      schema:
        required:
        - query
"""


def _shell(served: ServedApp, code: str) -> str:
    """Run ``code`` in that installation's shell; its last printed line."""
    lines = served.manage("shell", "-c", code).strip().splitlines()
    return lines[-1] if lines else ""


def _two_versions(served: ServedApp, workdir: Path) -> tuple[int, int]:
    """Import a first document, then the same plus a scope: two real versions."""
    first = workdir / "policy-first.yaml"
    first.write_text(FIRST)
    served.manage("policy", "import", str(first))
    exported = served.manage("policy", "export")
    second = workdir / "policy-second.yaml"
    second.write_text(exported.rstrip("\n") + "\n" + ADDED_SCOPE)
    served.manage("policy", "import", str(second))
    numbers = _shell(
        served,
        "from policies.models import PolicyVersion as V; "
        "print(*V.objects.order_by('-number').values_list('number', flat=True)[:2])",
    )
    new, old = (int(n) for n in numbers.split())
    return old, new


def test_ops_read_the_policy_tree_a_diff_and_a_jobs_progress(
    page: Any, served: ServedApp, tmp_path: Path
) -> None:
    old, new = _two_versions(served, tmp_path)
    handler = int(
        _shell(
            served,
            "from policies.models import Strategy as S; "
            "print(S.objects.filter(kind='error_handler').latest('pk').pk)",
        )
    )
    _shell(
        served,
        "from policies.services import strategy_outcome_record as record; "
        f"[record(strategy_id={handler}, success=s) for s in (True, True, False, True)]",
    )
    login(page, served.url, "ops", "ops-demo")

    page.click("nav >> text=Policies")
    page.wait_for_selector("#policy-tree")
    tree = page.inner_text("#policy-tree")
    assert "search_products" in tree and "validation_rules (1)" in tree
    assert "degrade_cache" in tree
    assert f"Policy v{new}" in page.inner_text("h1")
    screenshot(page, f"policies_tree-{served.shape}")

    page.click(f"text=What changed since v{old}")
    page.wait_for_selector("#diff")
    assert f"?a={old}&b={new}" in page.url
    inserted = page.locator("#diff tr.insert td.new:not(.mark)").all_inner_texts()
    assert any("required:" in line for line in inserted)
    # Besides the added scope only the header moved on: the version and its parent.
    changed = page.locator(
        "#diff tr.delete td.old:not(.mark), #diff tr.replace td.old:not(.mark)"
    ).all_inner_texts()
    assert sorted(line.split(":")[0] for line in changed) == ["parent", "version"]
    screenshot(page, f"policies_diff-{served.shape}")

    page.goto(f"{served.url}/policies/strategies/{handler}/")
    page.wait_for_selector("#confidence-chart polyline")
    assert page.locator("#confidence-events tbody tr").count() == 4
    screenshot(page, f"policies_strategy-{served.shape}")

    page.set_viewport_size({"width": 390, "height": 844})
    page.goto(f"{served.url}/policies/diff/?a={old}&b={new}")
    page.wait_for_selector("#diff")
    assert page.evaluate("document.querySelector('main').scrollWidth <= window.innerWidth")
    screenshot(page, f"policies_diff_390-{served.shape}")
    page.set_viewport_size({"width": 1280, "height": 900})

    job = int(
        _shell(
            served,
            "from traces.services import job_start, job_progress; "
            "j = job_start(kind='replay', name='browser: replay S1', total=4); "
            "job_progress(job_id=j.pk, message='replaying step 1'); print(j.pk)",
        )
    )
    page.click("nav >> text=Jobs")
    bar = page.wait_for_selector(f"#jobs-running #job-{job} progress")
    assert (bar.get_attribute("value"), bar.get_attribute("max")) == ("1", "4")
    screenshot(page, f"jobs-{served.shape}")

    _shell(
        served,
        "from traces.services import job_progress, job_finish; "
        f"job_progress(job_id={job}, advance=3); "
        f"job_finish(job_id={job}, message='passed: replayed', result_url='/traces/')",
    )
    # No reload: htmx polls the block while a job runs.
    page.wait_for_selector(f"#jobs-ended #job-{job}", timeout=30_000)
    assert re.search(r"passed: replayed", page.inner_text(f"#jobs-ended #job-{job}"))
    assert page.locator(f"#jobs-running #job-{job}").count() == 0


def test_an_admin_filters_the_audit_log(page: Any, served: ServedApp, tmp_path: Path) -> None:
    _two_versions(served, tmp_path)
    login(page, served.url, "admin", "admin-demo")
    page.click("nav >> text=Audit log")
    page.wait_for_selector("form.filters")
    page.fill("input[name=action]", "policy_version.create")
    page.click("form.filters button")
    page.wait_for_url(re.compile(r"action=policy_version\.create"))
    actions = page.locator("#audit td[data-label=Action]").all_inner_texts()
    assert actions and set(actions) == {"policy_version.create"}
    screenshot(page, f"audit_log-{served.shape}")
