"""The review queue: items people decide on, and the audit log of every decision."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.urls import reverse


class ReviewItem(models.Model):
    """A strategy, a stopped error signature or a thumbs-down answer waiting for a person."""

    class Reason(models.TextChoices):
        LOW_CONFIDENCE = "low_confidence", "Proposed strategy awaiting approval"
        CONSECUTIVE_FAILURES = "consecutive_failures", "Active strategy failed twice in a row"
        NEGATIVE_FEEDBACK = "negative_feedback", "Strategy chain keeps failing on one signature"
        THUMBS_DOWN = "thumbs_down", "A support agent marked an answer as wrong"

    class Status(models.TextChoices):
        OPEN = "open"
        # A reviewer asked for more evidence; new evidence (or a person) reopens it.
        NEEDS_EVIDENCE = "needs_evidence", "Needs evidence"
        APPROVED = "approved"
        REJECTED = "rejected"

    strategy = models.ForeignKey(
        "policies.Strategy",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="review_items",
    )
    error_signature = models.CharField(max_length=200, blank=True, db_index=True)
    # The run behind the item (a thumbs-down names the answer that was wrong).
    trace = models.ForeignKey(
        "traces.Trace",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="review_items",
    )
    reason = models.CharField(max_length=24, choices=Reason.choices)
    detail = models.TextField(blank=True)
    status = models.CharField(
        max_length=16, choices=Status.choices, default=Status.OPEN, db_index=True
    )
    assigned_to = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="review_assignments",
    )
    locked_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    locked_at = models.DateTimeField(null=True, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_note = models.TextField(blank=True)
    # What the reviewer asked for when they sent it back for more evidence, and when.
    evidence_request = models.TextField(blank=True)
    evidence_requested_at = models.DateTimeField(null=True, blank=True)
    # What approving published: "published as version v7", or why nothing was yet.
    published = models.CharField(max_length=120, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["status", "-created_at"]
        permissions = [("review_strategies", "Can approve and reject proposed strategies")]

    def __str__(self) -> str:
        return f"review {self.reason} [{self.status}]"

    def get_absolute_url(self) -> str:
        return reverse("reviews:item", args=[self.pk])

    @property
    def is_open(self) -> bool:
        return self.status == self.Status.OPEN


class AuditLog(models.Model):
    """Who did what to the policy tree and when (people and the automation alike)."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_kind = models.CharField(max_length=20, default="system")
    action = models.CharField(max_length=60)
    target = models.CharField(max_length=100)
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created_at"]
        # The audit page filters by one of these and pages by time: each stays a range read.
        indexes = [
            models.Index(fields=["action", "-created_at"], name="auditlog_action_time"),
            models.Index(fields=["target", "-created_at"], name="auditlog_target_time"),
            models.Index(fields=["actor_kind", "-created_at"], name="auditlog_actorkind_time"),
        ]

    def __str__(self) -> str:
        return f"{self.created_at:%Y-%m-%d %H:%M} {self.actor_kind} {self.action} {self.target}"
