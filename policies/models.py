"""The versioned policy tree: policies (scopes), strategies (branches) and immutable versions."""

from __future__ import annotations

import re
from typing import Any

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from policies.branches import branch_describe

# policies.replay writes "replay run <trace id>: <status> (<outcome>)" into
# Strategy.replay_detail.
_REPLAY_RUN = re.compile(
    r"replay run ([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})"
)


class Policy(models.Model):
    """A scope of strategies: an intent and/or a tool (both blank = global)."""

    intent = models.CharField(max_length=40, blank=True)
    tool_name = models.CharField(max_length=64, blank=True)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["tool_name", "intent"]
        constraints = [
            models.UniqueConstraint(fields=["intent", "tool_name"], name="policy_unique_scope")
        ]
        verbose_name_plural = "policies"

    def __str__(self) -> str:
        return f"policy tool={self.tool_name or '*'} intent={self.intent or '*'}"


class Strategy(models.Model):
    """One branch of the tree: a machine-applicable rule plus why it exists and how it fares."""

    class Kind(models.TextChoices):
        PRE_CONDITION = "pre_condition"
        VALIDATION_RULE = "validation_rule"
        ERROR_HANDLER = "error_handler"
        ADAPTER = "adapter"
        PROMPT_HINT = "prompt_hint"

    class Status(models.TextChoices):
        PROPOSED = "proposed"
        IN_REVIEW = "in_review"
        APPROVED = "approved"
        ACTIVE = "active"
        DEPRECATED = "deprecated"
        REJECTED = "rejected"

    class Replay(models.TextChoices):
        NOT_RUN = "not_run"
        PASSED = "passed"
        FAILED = "failed"

    policy = models.ForeignKey(Policy, on_delete=models.PROTECT, related_name="strategies")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    tool_name = models.CharField(max_length=64, blank=True)
    intent = models.CharField(max_length=40, blank=True)
    error_type = models.CharField(max_length=40, blank=True)
    root_cause = models.CharField(max_length=200)
    strategy_update = models.CharField(max_length=250)
    branch = models.JSONField(help_text="The machine-applicable rule; its shape depends on kind.")
    signature = models.CharField(max_length=64, db_index=True)
    confidence = models.FloatField(default=0.7)
    status = models.CharField(
        max_length=12, choices=Status.choices, default=Status.PROPOSED, db_index=True
    )
    applications = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    consecutive_failures = models.PositiveIntegerField(default=0)
    agree_count = models.PositiveIntegerField(default=1)
    origin = models.CharField(max_length=40, help_text="analyzer:<name>, llm, import, human")
    replay_status = models.CharField(max_length=8, choices=Replay.choices, default=Replay.NOT_RUN)
    replay_detail = models.TextField(blank=True)
    needs_review = models.BooleanField(default=False)
    source_traces = models.ManyToManyField("traces.Trace", related_name="strategies", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["id"]
        verbose_name_plural = "strategies"

    def __str__(self) -> str:
        return f"S{self.pk} {self.kind} {self.tool_name or '*'} {self.error_type}".strip()

    @property
    def label(self) -> str:
        return f"S{self.pk}"

    @property
    def model_backend(self) -> str:
        """The LLM backend that proposed it (origin ``llm:<backend>``); "" when an analyzer
        or a person did."""
        kind, _, backend = self.origin.partition(":")
        return (backend or "unknown") if kind == "llm" else ""

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.applications if self.applications else None

    @property
    def branch_description(self) -> str:
        """The branch as a sentence; reviewers read this, not the JSON."""
        return branch_describe(self.kind, self.branch)

    @property
    def replay_trace_id(self) -> str | None:
        """The run the replay made, named in ``replay_detail`` (every kind's replay ends by
        running the request again; one that failed before that stage has none)."""
        match = _REPLAY_RUN.search(self.replay_detail)
        return match.group(1) if match else None


class PolicyVersion(models.Model):
    """An immutable snapshot of the tree as YAML; at most one is active."""

    class AuthorKind(models.TextChoices):
        INITIAL = "initial"
        REVIEWER = "reviewer"
        AUTO_MERGE = "auto_merge"
        IMPORT = "import"

    number = models.PositiveIntegerField(unique=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    author_kind = models.CharField(max_length=12, choices=AuthorKind.choices)
    strategies = models.ManyToManyField(Strategy, related_name="versions", blank=True)
    source_strategies = models.ManyToManyField(
        Strategy,
        related_name="introduced_in",
        blank=True,
        help_text="The strategies whose approval produced this version.",
    )
    document = models.TextField()
    checksum = models.CharField(max_length=64)
    note = models.CharField(max_length=200, blank=True)
    is_active = models.BooleanField(default=False, db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_active"],
                condition=models.Q(is_active=True),
                name="policyversion_one_active",
            )
        ]

    def __str__(self) -> str:
        return f"v{self.number}" + (" (active)" if self.is_active else "")

    def save(self, *args: Any, **kwargs: Any) -> None:
        # Immutable once written: a version is evidence of what ran. Only activation moves.
        if not self._state.adding and set(kwargs.get("update_fields") or ["*"]) != {"is_active"}:
            raise ValueError(f"PolicyVersion v{self.number} is immutable; publish a new version.")
        super().save(*args, **kwargs)

    @property
    def label(self) -> str:
        return f"v{self.number}"


class ReflexionProposal(models.Model):
    """Every proposal the Reflexion engine produced, accepted or not, with its reason."""

    class Outcome(models.TextChoices):
        ADDED = "added"
        AGREED = "agreed"
        EDITED = "edited"
        REJECTED = "rejected"
        STOPPED = "stopped"  # negative-feedback guard

    trace = models.ForeignKey("traces.Trace", on_delete=models.CASCADE, related_name="proposals")
    step_number = models.PositiveIntegerField(null=True, blank=True)
    error_type = models.CharField(max_length=40)
    error_signature = models.CharField(max_length=200, db_index=True)
    origin = models.CharField(max_length=40)
    payload: Any = models.JSONField()
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    reason = models.TextField(blank=True)
    gate_results = models.JSONField(default=dict, blank=True)
    strategy = models.ForeignKey(
        Strategy, null=True, blank=True, on_delete=models.SET_NULL, related_name="proposals"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.origin} {self.error_type} -> {self.outcome}"


class StrategyConfidenceEvent(models.Model):
    """One move of a strategy's confidence, appended in the transaction that made it."""

    strategy = models.ForeignKey(
        Strategy, on_delete=models.CASCADE, related_name="confidence_events"
    )
    at = models.DateTimeField(auto_now_add=True)
    old = models.FloatField()
    new = models.FloatField()
    reason = models.CharField(max_length=40, help_text="success, failure")
    trace = models.ForeignKey(
        "traces.Trace",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="confidence_events",
    )

    class Meta:
        ordering = ["strategy", "at", "id"]
        indexes = [models.Index(fields=["strategy", "at"], name="confidence_event_history")]

    def __str__(self) -> str:
        return f"S{self.strategy_id} {self.old:.2f} -> {self.new:.2f} ({self.reason})"


class Rollout(models.Model):
    """A canary: an inactive version served to a growing share of traffic until it is
    promoted to the active version or rolled back.

    The policy tree is versioned as one document, so at most one rollout is open at a time
    (a partial unique index, not a check in code); strategies approved meanwhile wait.
    """

    class State(models.TextChoices):
        RUNNING = "running"
        PAUSED = "paused"
        COMPLETED = "completed"
        ROLLED_BACK = "rolled_back"

    OPEN_STATES = (State.RUNNING, State.PAUSED)

    version = models.OneToOneField(
        PolicyVersion, on_delete=models.PROTECT, related_name="rollout", help_text="The canary."
    )
    stable = models.ForeignKey(
        PolicyVersion,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The active version when the rollout started.",
    )
    strategy = models.ForeignKey(Strategy, on_delete=models.PROTECT, related_name="rollouts")
    replaced = models.JSONField(
        default=list, blank=True, help_text="Ids of the rivals the canary replaces."
    )
    schedule = models.JSONField(help_text="The percentages, copied from ROLLOUT_SCHEDULE.")
    percent = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=12, choices=State.choices, default=State.RUNNING)
    is_open = models.BooleanField(default=True)
    step_started_at = models.DateTimeField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    author_kind = models.CharField(max_length=12, blank=True)
    end_reason = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["is_open"],
                condition=models.Q(is_open=True),
                name="rollout_one_open_per_policy",
            ),
            models.CheckConstraint(
                condition=models.Q(percent__lte=100), name="rollout_percent_max_100"
            ),
        ]
        permissions = [
            (
                "manage_rollouts",
                "Can pause, resume, set, promote and roll back canary rollouts",
            )
        ]

    def __str__(self) -> str:
        return f"rollout {self.pk} v{self.version.number} {self.state} {self.percent}%"

    @property
    def label(self) -> str:
        return f"rollout {self.pk}"


class RolloutDecision(models.Model):
    """One decision on a rollout, by the evaluator or a person, with the numbers behind it."""

    class Action(models.TextChoices):
        START = "start"
        HOLD = "hold"
        PROMOTE = "promote"
        COMPLETE = "complete"
        ROLLBACK = "rollback"
        PAUSE = "pause"
        RESUME = "resume"
        SET_PERCENT = "set_percent"

    rollout = models.ForeignKey(Rollout, on_delete=models.CASCADE, related_name="decisions")
    at = models.DateTimeField(auto_now_add=True)
    action = models.CharField(max_length=12, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    actor_kind = models.CharField(max_length=12, help_text="user, evaluator, system")
    from_percent = models.PositiveSmallIntegerField()
    to_percent = models.PositiveSmallIntegerField()
    reason = models.CharField(max_length=300, blank=True)
    window_start = models.DateTimeField(null=True, blank=True)
    window_end = models.DateTimeField(null=True, blank=True)
    canary_n = models.PositiveIntegerField(default=0)
    stable_n = models.PositiveIntegerField(default=0)
    canary_error_rate = models.FloatField(null=True, blank=True)
    stable_error_rate = models.FloatField(null=True, blank=True)
    canary_success_rate = models.FloatField(null=True, blank=True)
    stable_success_rate = models.FloatField(null=True, blank=True)
    statistic = models.FloatField(null=True, blank=True, help_text="Two-proportion z.")
    p_value = models.FloatField(null=True, blank=True)
    canary_p50_ms = models.FloatField(null=True, blank=True)
    canary_p95_ms = models.FloatField(null=True, blank=True)
    stable_p50_ms = models.FloatField(null=True, blank=True)
    stable_p95_ms = models.FloatField(null=True, blank=True)
    details = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["rollout", "at", "id"]
        indexes = [models.Index(fields=["rollout", "at"], name="rollout_decision_history")]

    def __str__(self) -> str:
        return f"{self.action} {self.from_percent}% -> {self.to_percent}% ({self.actor_kind})"


class Experiment(models.Model):
    """An A/B test of the learning loop (seed 000 §5.2): new sessions are split between a
    control arm that runs without learned strategies and a treatment arm that runs with
    the policy it would get anyway; the report compares the arms. At most one runs."""

    class Status(models.TextChoices):
        DRAFT = "draft"
        RUNNING = "running"
        STOPPED = "stopped"

    class Arm(models.TextChoices):
        CONTROL = "control", "Control: no learned strategies"
        TREATMENT = "treatment", "Treatment: learned strategies"

    name = models.CharField(max_length=100)
    hypothesis = models.TextField(blank=True, max_length=2000)
    status = models.CharField(
        max_length=8, choices=Status.choices, default=Status.DRAFT, db_index=True
    )
    traffic_percent = models.PositiveSmallIntegerField(
        default=100,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Share of new sessions that enter the experiment, split evenly between "
        "the two arms; the other sessions run as usual and are not counted.",
    )
    planned_runs_per_arm = models.PositiveIntegerField(
        default=200,
        validators=[MinValueValidator(10), MaxValueValidator(1_000_000)],
        help_text="The sample size the verdict is read at (p-values are fixed-horizon).",
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["status"],
                condition=models.Q(status="running"),
                name="experiment_one_running",
            ),
            models.CheckConstraint(
                condition=models.Q(traffic_percent__gte=1, traffic_percent__lte=100),
                name="experiment_traffic_percent_range",
            ),
        ]
        permissions = [("run_experiments", "Can create, start and stop A/B experiments")]

    def __str__(self) -> str:
        return f"E{self.pk} {self.name} [{self.status}]"

    def get_absolute_url(self) -> str:
        from django.urls import reverse

        return reverse("policies:experiment", args=[self.pk])

    @property
    def label(self) -> str:
        return f"E{self.pk}"
