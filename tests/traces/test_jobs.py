"""Long-job progress: the services' state machine, concurrent reports, and the Jobs page."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import close_old_connections, connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agents.tasks import sweep_stuck_runs
from traces.models import Job
from traces.services import job_finish, job_progress, job_running, job_start

pytestmark = pytest.mark.django_db


def _client(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_progress_counts_up_and_finish_ends_the_job() -> None:
    job = job_start(kind=Job.Kind.REPLAY, name="replay S1", total=3)

    job_progress(job_id=job.pk, message="first")
    job_progress(job_id=job.pk, advance=2, message="rest")
    ended = job_finish(job_id=job.pk, result_url="/traces/x/")

    job.refresh_from_db()
    assert ended
    assert (job.status, job.done, job.total, job.message) == ("finished", 3, 3, "rest")
    assert job.finished_at is not None and job.result_url == "/traces/x/"


def test_a_job_starts_running_with_no_message_and_logs_its_size(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("INFO", logger="traces.services")
    job = job_start(kind=Job.Kind.REPLAY, name="r" * 200, total=-4)

    job.refresh_from_db()
    assert (job.status, job.done, job.total, job.message) == ("running", 0, 0, "")
    assert job.name == "r" * 120 and job.finished_at is None
    [logged] = [r for r in caplog.records if r.getMessage() == "job.start"]
    assert (logged.job_id, logged.kind, logged.total) == (job.pk, "replay", -4)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="unknown job kind"):
        job_start(kind="cleanup", name="nope")


def test_an_ended_job_never_moves_again() -> None:
    job = job_start(kind=Job.Kind.BENCHMARK, name="bench", total=2)
    job_finish(job_id=job.pk, ok=False, message="crashed")

    moved = job_progress(job_id=job.pk)
    finished_again = job_finish(job_id=job.pk, message="finished after all")

    job.refresh_from_db()
    assert not moved and not finished_again
    assert (job.status, job.done, job.message) == ("failed", 0, "crashed")


def test_a_block_that_raises_fails_its_job_with_the_reason() -> None:
    with pytest.raises(RuntimeError), job_running(kind=Job.Kind.REFLEXION, name="r") as job:
        job_progress(job_id=job.pk)
        raise RuntimeError("sandbox unreachable")

    job.refresh_from_db()
    assert job.status == "failed"
    assert job.message == "RuntimeError: sandbox unreachable"
    assert job.done == 1


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown job kind"):
        job_start(kind="mining", name="x")


@pytest.mark.django_db(transaction=True)
def test_concurrent_reports_are_all_counted() -> None:
    job = job_start(kind=Job.Kind.BENCHMARK, name="parallel", total=80)
    barrier = threading.Barrier(4)

    def report() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                job_progress(job_id=job.pk)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=report) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    job.refresh_from_db()
    assert job.done == 80


def test_the_jobs_page_shows_running_progress_and_ended_results(ops_user: Any) -> None:
    running = job_start(kind=Job.Kind.REFLEXION, name="reflexion on run 42", total=4)
    job_progress(job_id=running.pk, message="get_order:TYPE_MISMATCH: added")
    ended = job_start(kind=Job.Kind.REPLAY, name="replay adapter", total=1)
    job_progress(job_id=ended.pk)
    job_finish(job_id=ended.pk, message="passed: 200", result_url="/traces/abc/")

    page = _client(ops_user).get("/traces/jobs/").content.decode()

    assert '<progress class="jobbar" max="4" value="1">25%</progress> 1 / 4' in page
    assert "get_order:TYPE_MISMATCH: added" in page
    assert 'hx-trigger="every 2s"' in page
    assert "passed: 200" in page and '<a href="/traces/abc/">open</a>' in page
    # How long it took, to the tenth of a second ("0 minutes" for every job before)
    Job.objects.filter(pk=ended.pk).update(finished_at=ended.started_at + timedelta(seconds=2.4))
    page = _client(ops_user).get("/traces/jobs/").content.decode()
    assert '<td data-label="Took">2.4 s</td>' in page


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0.04, "0.0 s"), (9.96, "10.0 s"), (42, "42 s"), (125, "2 min 5 s"), (180, "3 min"),
     (3725, "1 h 2 min")],
)  # fmt: skip
def test_a_jobs_duration_reads_to_the_second(seconds: float, shown: str) -> None:
    from traces.templatetags.trace_format import took

    start = timezone.now()
    assert took(start, start + timedelta(seconds=seconds)) == shown
    assert took(start, None) == ""


def test_with_nothing_running_the_page_polls_slowly_and_says_what_starts_jobs(
    ops_user: Any,
) -> None:
    page = _client(ops_user).get("/traces/jobs/partial/").content.decode()

    assert 'hx-trigger="every 10s"' in page
    assert "Nothing is running." in page and "make bench" in page
    assert "<html" not in page


def test_ended_jobs_filter_by_kind_and_the_poll_keeps_the_filter(ops_user: Any) -> None:
    for kind in (Job.Kind.REPLAY, Job.Kind.BENCHMARK):
        with job_running(kind=kind, name=f"a {kind} job"):
            pass

    page = _client(ops_user).get("/traces/jobs/?kind=replay").content.decode()

    assert "a replay job" in page and "a benchmark job" not in page
    assert 'hx-get="/traces/jobs/partial/?kind=replay"' in page


def test_support_agents_do_not_see_jobs(support_user: Any, ops_user: Any) -> None:
    assert _client(support_user).get("/traces/jobs/").status_code == 403
    assert 'href="/traces/jobs/"' not in _client(support_user).get("/traces/").content.decode()
    assert 'href="/traces/jobs/"' in _client(ops_user).get("/traces/").content.decode()


@pytest.mark.parametrize("path", ["/traces/jobs/", "/traces/jobs/partial/"])
def test_the_jobs_page_holds_its_query_count_as_jobs_pile_up(ops_user: Any, path: str) -> None:
    client = _client(ops_user)

    def pile(count: int) -> None:
        for n in range(count):
            job = job_start(kind=Job.Kind.REPLAY, name=f"job {n}", total=2)
            if n % 2:
                job_finish(job_id=job.pk)

    pile(3)
    with CaptureQueriesContext(connection) as few:
        client.get(path)
    pile(120)
    with CaptureQueriesContext(connection) as many:
        page = client.get(path).content.decode()

    assert len(many) == len(few)
    assert page.count('<tr id="job-') == 100  # 50 running and 50 ended, bounded


def test_the_sweeper_fails_jobs_that_stopped_reporting() -> None:
    stale = job_start(kind=Job.Kind.BENCHMARK, name="killed bench", total=9)
    fresh = job_start(kind=Job.Kind.REPLAY, name="replay in progress", total=1)
    Job.objects.filter(pk=stale.pk).update(updated_at=timezone.now() - timedelta(minutes=31))

    sweep_stuck_runs()

    stale.refresh_from_db()
    fresh.refresh_from_db()
    assert stale.status == "failed" and "no progress for 30 min" in stale.message
    assert stale.finished_at is not None
    assert fresh.status == "running"


def test_a_job_message_quoting_a_secret_is_redacted() -> None:
    job = job_start(kind="replay", name="x", message="found api_key=sk-live-0123456789abcdef")
    assert job.message == "found api_key=[REDACTED]"
    job_progress(job_id=job.pk, message="card 4111111111111111")
    job.refresh_from_db()
    assert job.message == "card [REDACTED]"
    assert job_finish(job_id=job.pk, ok=False, message="password=hunter2secret " + "x" * 400)
    job.refresh_from_db()
    assert job.message.startswith("password=[REDACTED] x") and len(job.message) == 300
