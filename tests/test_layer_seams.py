"""The seams through which a lower layer hears from an upper one (docs/architecture.md):
each is wired when the app registry is ready, and a lower layer left without its upper one
fails loudly or does nothing, never reaches up."""

from __future__ import annotations

import uuid

import pytest
from django.core.exceptions import ImproperlyConfigured

from agents.external_runs import external_agent_ids
from agents.models import Agent
from policies import hooks as policy_hooks
from policies.signals import (
    audit_event,
    review_requested,
    strategy_auto_merged,
    strategy_evidence_added,
)
from reviews.models import AuditLog, ReviewItem
from reviews.receivers import DatabaseReviewRecords
from traces import otlp
from traces.otlp import SpanIn, otlp_spans_ingest


def test_reviews_listens_to_the_learning_loop() -> None:
    for signal in (audit_event, review_requested, strategy_auto_merged, strategy_evidence_added):
        assert signal.has_listeners(), signal
    assert isinstance(policy_hooks.review_records(), DatabaseReviewRecords)
    assert otlp._agent_ids_resolver is external_agent_ids


def _span() -> SpanIn:
    return SpanIn(
        trace_id=uuid.uuid4().hex,
        span_id="00000000000000a1",
        parent_span_id="",
        name="invoke_agent x",
        start_ns=1_700_000_000_000_000_000,
        end_ns=1_700_000_000_900_000_000,
        status_code=0,
        status_message="",
        attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "Seam Bot"},
    )


@pytest.mark.django_db(transaction=True)
def test_otlp_ingest_files_runs_through_the_registered_resolver(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    otlp_spans_ingest([_span()], user_id=None)
    assert Agent.objects.filter(slug="seam-bot", is_active=False).exists()
    # Without the runtime's resolver the store cannot file a run, and says why.
    monkeypatch.setattr(otlp, "_agent_ids_resolver", None)
    with pytest.raises(ImproperlyConfigured, match="agents app"):
        otlp_spans_ingest([_span()], user_id=None)


@pytest.mark.django_db
def test_without_reviews_the_loop_writes_nothing_of_reviews(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The learning loop only announces; with nobody listening no review row appears.
    monkeypatch.setattr(review_requested, "receivers", [])
    monkeypatch.setattr(audit_event, "receivers", [])
    review_requested.sender_receivers_cache.clear()
    audit_event.sender_receivers_cache.clear()
    review_requested.send(sender=None, error_signature="x", reason="negative_feedback", detail="")
    audit_event.send(
        sender=None, actor=None, actor_kind="system", action="a", target="t", details={}
    )
    assert not ReviewItem.objects.exists() and not AuditLog.objects.exists()
    monkeypatch.setattr(policy_hooks, "_records", policy_hooks._NoReviews())
    hold = policy_hooks.review_records().signature_hold("x")
    assert not hold.held and hold.decided_at is None
    assert policy_hooks.review_records().approval_last("S1") is None
