"""A rollout percentage changed in one process is applied by a separate worker process
within one second, without a restart (issue 8, "Propagation").

The worker here is a separate Python process with its own Django and its own per-process
routing cache, asking ``runtime_policy_for_run`` what a customer's run would apply the way
a Celery worker or the embedded worker does for every run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from policies.models import Rollout, Strategy
from policies.rollout_stats import rollout_routes_canary, routing_key
from policies.rollouts import rollout_manual
from policies.services import strategy_activate

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]
WORKER = """
import sys, time
import django
django.setup()
from policies.selectors import runtime_policy_for_run
customer = sys.argv[1]
last = None
deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    version = runtime_policy_for_run(customer_id=customer).version
    if version != last:
        print(f"{time.time():.4f} {version}", flush=True)
        last = version
    time.sleep(0.01)
"""


@pytest.fixture
def rollout(make_strategy: Any, settings: Any) -> Rollout:
    settings.POLICY_PUBLISH = "canary"
    stable = make_strategy(
        branch={"tool": "get_order", "field": "order_id", "transform": "strip"},
        status=Strategy.Status.PROPOSED,
    )
    strategy_activate(strategy=stable, author_kind="reviewer", at_once=True)
    version = strategy_activate(
        strategy=make_strategy(status=Strategy.Status.IN_REVIEW), author_kind="reviewer"
    )
    return Rollout.objects.get(version=version)


@pytest.fixture
def worker(rollout: Rollout) -> Iterator[tuple[subprocess.Popen[str], str]]:
    # a customer the 1% step leaves on stable and a 50% step moves to the canary
    customer = next(
        f"C{i}"
        for i in range(10_000)
        if not rollout_routes_canary(
            rollout_id=rollout.pk, key=routing_key(customer_id=f"C{i}"), percent=1
        )
        and rollout_routes_canary(
            rollout_id=rollout.pk, key=routing_key(customer_id=f"C{i}"), percent=50
        )
    )
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.test",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "PYTHONPATH": str(ROOT),
    }
    process = subprocess.Popen(
        [sys.executable, "-c", WORKER, customer],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield process, customer
    finally:
        process.kill()
        process.wait(timeout=10)


def _next_version(process: subprocess.Popen[str]) -> tuple[float, str]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "the worker process ended"
    at, _, version = line.strip().partition(" ")
    return float(at), version


def test_a_percentage_change_reaches_another_process_within_a_second(
    rollout: Rollout, worker: tuple[subprocess.Popen[str], str]
) -> None:
    process, _ = worker
    _, first = _next_version(process)
    assert first == rollout.stable.label  # type: ignore[union-attr]

    rollout_manual(rollout_id=rollout.pk, action="set_percent", percent=50, actor=None)
    changed = time.time()
    at, version = _next_version(process)
    assert version == rollout.version.label
    assert at - changed < 1.0, f"the worker applied 50% after {at - changed:.3f}s"

    rollout_manual(rollout_id=rollout.pk, action="rollback", actor=None, note="back")
    changed = time.time()
    at, version = _next_version(process)
    assert version == rollout.stable.label  # type: ignore[union-attr]
    assert at - changed < 1.0, f"the worker applied the rollback after {at - changed:.3f}s"
