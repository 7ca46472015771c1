"""Traces (one per agent run), their Steps, and the failure-classifier rule table."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.urls import reverse

from traces.patterns import validate_body_pattern


class ErrorType(models.TextChoices):
    """The failure taxonomy every classified Step error belongs to."""

    RESOURCE_NOT_FOUND = "RESOURCE_NOT_FOUND"
    INVALID_PARAMETER = "INVALID_PARAMETER"
    MISSING_REQUIRED_FIELD = "MISSING_REQUIRED_FIELD"
    TYPE_MISMATCH = "TYPE_MISMATCH"
    UNAUTHORIZED = "UNAUTHORIZED"
    RATE_LIMITED = "RATE_LIMITED"
    INTERNAL_SERVER_ERROR = "INTERNAL_SERVER_ERROR"
    SERVICE_UNAVAILABLE = "SERVICE_UNAVAILABLE"
    TIMEOUT = "TIMEOUT"
    MODEL_FORMAT_ERROR = "MODEL_FORMAT_ERROR"
    TOOL_NOT_ALLOWED = "TOOL_NOT_ALLOWED"
    INVALID_ENDPOINT = "INVALID_ENDPOINT"
    HALLUCINATED_ANSWER = "HALLUCINATED_ANSWER"
    # The reasoning guards (agents.reasoning_guards): a thought stating a fact that neither
    # the request nor the context holds, and a reflection that glosses over a failure.
    UNGROUNDED_THOUGHT = "UNGROUNDED_THOUGHT"
    FAKE_REFLECTION = "FAKE_REFLECTION"
    LOOP_DETECTED = "LOOP_DETECTED"
    MAX_STEPS = "MAX_STEPS"
    TOOL_SUSPENDED = "TOOL_SUSPENDED"
    RESPONSE_TOO_LARGE = "RESPONSE_TOO_LARGE"
    CONNECTION_ERROR = "CONNECTION_ERROR"
    LLM_ERROR = "LLM_ERROR"
    RUN_TIME_LIMIT = "RUN_TIME_LIMIT"
    UNKNOWN = "UNKNOWN"


class Trace(models.Model):
    """One agent run: the query, where it ran, how it ended, and its totals."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        FALLBACK = "fallback"
        FAILED = "failed"

    class Outcome(models.TextChoices):
        """How the run ended for the customer; blank until it ends."""

        ANSWERED_FROM_DATA = "answered_from_data", "Answered from data"
        ANSWERED_WITHOUT_DATA = "answered_without_data", "Answered without needing data"
        ASKED_CUSTOMER = "asked_customer", "Asked the customer for information"
        HANDED_OVER = "handed_over", "Handed over"
        FAILED = "failed", "Failed"

    class Origin(models.TextChoices):
        """Who asked: customers, or the learning loop checking itself (kept out of metrics)."""

        CUSTOMER = "customer"
        REPLAY = "replay"
        EXPERIMENT = "experiment"
        # Ingested over OTLP from an agent built with another framework.
        EXTERNAL = "external"

    class Learning(models.TextChoices):
        """What the learning loop still owes an ended run; blank: nothing.

        Set when the run ends, in the same UPDATE, so that a worker that dies before the
        hand-off, or a broker that is away, leaves a mark that the learning sweep finds.
        """

        PENDING = "pending", "Outcome to score, Reflexion to queue"
        SCORED = "scored", "Scored; Reflexion to queue"

    TERMINAL_STATUSES = (Status.FINISHED, Status.FALLBACK, Status.FAILED)
    # The status each outcome implies: only an answer or a question is a success.
    OUTCOME_STATUS = {
        Outcome.ANSWERED_FROM_DATA: Status.FINISHED,
        Outcome.ANSWERED_WITHOUT_DATA: Status.FINISHED,
        Outcome.ASKED_CUSTOMER: Status.FINISHED,
        Outcome.HANDED_OVER: Status.FALLBACK,
        Outcome.FAILED: Status.FAILED,
    }

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    query = models.TextField()
    # Indexed in Meta: a plain B-tree each, without the LIKE index db_index adds to a
    # CharField on PostgreSQL (no query matches these by pattern).
    query_hash = models.CharField(max_length=32)
    session_id = models.CharField(max_length=64, blank=True)
    customer_id = models.CharField(max_length=64, blank=True)
    # Looked up through trace_agent_time and trace_owner_time, which lead with them.
    agent = models.ForeignKey(
        "agents.Agent", on_delete=models.PROTECT, related_name="traces", db_index=False
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        db_index=False,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="traces",
    )
    source = models.CharField(max_length=20, default="api")  # api | cli | chat | bench
    origin = models.CharField(max_length=10, choices=Origin.choices, default=Origin.CUSTOMER)
    # The customer's style for the answer (BCP 47 tag, IANA zone); blank: the site default.
    locale = models.CharField(max_length=35, blank=True)
    time_zone = models.CharField(max_length=64, blank=True)
    llm_backend = models.CharField(max_length=20)
    llm_model = models.CharField(max_length=100, blank=True)
    policy_version = models.CharField(max_length=40, blank=True)
    policy_bucket = models.PositiveSmallIntegerField(null=True, blank=True)
    status = models.CharField(  # indexed by trace_status_time
        max_length=10, choices=Status.choices, default=Status.QUEUED
    )
    error_type = models.CharField(max_length=40, choices=ErrorType.choices, blank=True)
    outcome = models.CharField(max_length=24, choices=Outcome.choices, blank=True)
    final_answer = models.TextField(blank=True)
    total_steps = models.PositiveIntegerField(default=0)
    total_latency_ms = models.PositiveIntegerField(default=0)
    total_tokens = models.PositiveIntegerField(default=0)
    total_cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    # Steps with ok=False, a total stored when the run ends, like the others: the trace list
    # shows it without counting Steps.
    failed_steps = models.PositiveIntegerField(default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Set once when a support agent hands the conversation to a person: the takeover KPI.
    handed_over_at = models.DateTimeField(null=True, blank=True)
    handed_over_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    # Tool calls made after a failed one (the agent trying again); a total set at the end.
    retries = models.PositiveSmallIntegerField(default=0)
    # The A/B experiment (policies.Experiment) and arm this run was assigned to, if any: a
    # plain id, since the trace store sits below the learning loop.
    experiment_pk = models.PositiveIntegerField(null=True, blank=True)
    experiment_arm = models.CharField(max_length=10, blank=True)
    learning = models.CharField(
        max_length=8, choices=Learning.choices, blank=True, default="", db_default=""
    )

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(
                fields=["experiment_pk", "experiment_arm"],
                name="trace_experiment_arm",
                condition=models.Q(experiment_pk__isnull=False),
            ),
            models.Index(fields=["status", "created_at"], name="trace_status_time"),
            models.Index(fields=["outcome", "created_at"], name="trace_outcome_time"),
            models.Index(fields=["origin", "created_at"], name="trace_origin_time"),
            # The trace list's and the API's other filters and orderings, each with the
            # list's newest-first order so that a page is an index range, never a sort.
            models.Index(fields=["error_type", "created_at"], name="trace_error_time"),
            models.Index(fields=["created_by", "created_at"], name="trace_owner_time"),
            models.Index(fields=["agent", "created_at"], name="trace_agent_time"),
            models.Index(fields=["policy_version", "created_at"], name="trace_version_time"),
            models.Index(fields=["policy_bucket", "created_at"], name="trace_bucket_time"),
            models.Index(fields=["total_latency_ms"], name="trace_latency"),
            models.Index(fields=["query_hash"], name="trace_query_hash"),
            models.Index(fields=["session_id"], name="trace_session"),
            models.Index(fields=["customer_id"], name="trace_customer"),
            # A user's runs in flight, counted before each new one (AGENT_RUNS_IN_FLIGHT_PER_USER).
            models.Index(
                fields=["created_by"],
                name="trace_owner_in_flight",
                condition=models.Q(status__in=["queued", "running"]),
            ),
            # The learning sweep's work list: small, since a mark lives for seconds.
            models.Index(
                fields=["finished_at"],
                name="trace_learning_owed",
                condition=~models.Q(learning=""),
            ),
        ]
        # Without it a user sees only the runs they started.
        permissions = [
            ("view_all_traces", "Can view every user's traces and steps"),
            ("ingest_traces", "Can send OpenTelemetry traces to the OTLP endpoint"),
        ]

    def __str__(self) -> str:
        return f"{self.id} [{self.status}] {self.query[:60]}"

    def get_absolute_url(self) -> str:
        return reverse("traces:detail", args=[self.id])

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL_STATUSES


class Step(models.Model):
    """One phase of one round, written when it happens, before the next phase starts."""

    class Phase(models.TextChoices):
        REASONING = "reasoning"
        ACTION = "action"
        REFLECTION = "reflection"
        FINAL = "final"
        FALLBACK = "fallback"
        STOPPED = "stopped"
        RETRIEVAL = "retrieval"
        DRAFT = "draft"
        GRADE = "grade"

    class ActionType(models.TextChoices):
        TOOL = "tool"
        FINAL_ANSWER = "final_answer"
        NONE = "none"

    # Looked up through step_unique_number, which leads with it.
    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="steps", db_index=False)
    step_number = models.PositiveIntegerField()
    round_number = models.PositiveSmallIntegerField(default=0)
    phase = models.CharField(max_length=12, choices=Phase.choices)
    thought = models.TextField(blank=True)
    action_type = models.CharField(
        max_length=12, choices=ActionType.choices, default=ActionType.NONE
    )
    tool_name = models.CharField(max_length=64, blank=True)
    action_input = models.JSONField(default=dict, blank=True)
    endpoint = models.CharField(max_length=500, blank=True)
    request_payload = models.JSONField(default=dict, blank=True)
    status_code = models.PositiveSmallIntegerField(null=True, blank=True)
    ok = models.BooleanField(default=True)
    error_type = models.CharField(max_length=40, choices=ErrorType.choices, blank=True)
    error_detail = models.TextField(blank=True)
    response_size = models.PositiveIntegerField(default=0)
    response_summary = models.TextField(blank=True)
    latency_ms = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=12, decimal_places=6, default=0)
    llm_backend = models.CharField(max_length=20, blank=True)
    parse_mode = models.CharField(max_length=10, blank=True)  # strict | lenient
    adapters_fired = models.JSONField(default=list, blank=True)
    strategies_applied = models.JSONField(default=list, blank=True)
    strategy_version = models.CharField(max_length=40, blank=True)
    idempotency_key = models.CharField(max_length=64, null=True, blank=True)  # unique: Meta
    details = models.JSONField(default=dict, blank=True)
    started_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["trace", "step_number"]
        constraints = [
            models.UniqueConstraint(fields=["trace", "step_number"], name="step_unique_number"),
            # A constraint rather than unique=True, which adds a LIKE index on PostgreSQL.
            models.UniqueConstraint(fields=["idempotency_key"], name="step_idempotency_key"),
        ]
        indexes = [
            models.Index(fields=["error_type", "created_at"], name="step_error_time"),
            models.Index(fields=["tool_name", "created_at"], name="step_tool_time"),
            # The steps API's newest-first list (an append-only B-tree on a rising time).
            models.Index(fields=["created_at"], name="step_time"),
            # The trace list's step_error filter probes each trace's failed steps: a small
            # index (failed steps only) that answers without reading the table.
            models.Index(
                fields=["trace", "error_type"],
                name="step_failed_by_trace",
                condition=~models.Q(error_type=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.trace_id}#{self.step_number} {self.phase}"

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class Feedback(models.Model):
    """A person's thumbs up or down on a run's answer; one per person and run."""

    class Rating(models.TextChoices):
        UP = "up", "Thumbs up"
        DOWN = "down", "Thumbs down"

    trace = models.ForeignKey(Trace, on_delete=models.CASCADE, related_name="feedback")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="trace_feedback"
    )
    rating = models.CharField(max_length=4, choices=Rating.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        constraints = [
            models.UniqueConstraint(fields=["trace", "user"], name="feedback_one_per_user")
        ]
        indexes = [models.Index(fields=["rating", "updated_at"], name="feedback_rating_time")]

    def __str__(self) -> str:
        return f"{self.trace_id} {self.rating} by {self.user_id}"


class ErrorRule(models.Model):
    """One row of the ordered failure-classifier table; the first matching rule wins.

    Every non-empty condition must hold. ``source`` says what the event is: an HTTP tool
    response, an executor/exception code, an unparseable model output, a final answer,
    or a runtime breaker.
    """

    class Source(models.TextChoices):
        HTTP = "http", "Tool HTTP response"
        EXECUTOR = "executor", "Executor / exception code"
        MODEL_OUTPUT = "model_output", "Model output (parse)"
        FINAL_ANSWER = "final_answer", "Final answer check"
        RUNTIME = "runtime", "Runtime breaker"
        REASONING_GUARD = "reasoning_guard", "Reasoning guard (thought / reflection)"

    position = models.PositiveIntegerField(db_index=True, help_text="Lower runs first.")
    name = models.CharField(max_length=100)
    source = models.CharField(max_length=20, choices=Source.choices)
    status_min = models.PositiveSmallIntegerField(null=True, blank=True)
    status_max = models.PositiveSmallIntegerField(null=True, blank=True)
    exception_class = models.CharField(
        max_length=100, blank=True, help_text="Executor code or exception class name."
    )
    body_pattern = models.CharField(
        max_length=300,
        blank=True,
        validators=[validate_body_pattern],
        help_text="Case-insensitive regex (RE2 syntax) searched in the body's first 64 KiB.",
    )
    error_type = models.CharField(max_length=40, choices=ErrorType.choices)
    enabled = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["position", "id"]

    def __str__(self) -> str:
        return f"{self.position}. {self.name} -> {self.error_type}"


class RollupDims(models.Model):
    """The dimensions every rollup row is keyed by, besides its own.

    ``bucket_band`` is the lower bound of the canary band the run's policy bucket falls in
    (0, 1, 5, 25, 50: the rollout stages), so any rollout stage's arm is a sum of bands
    while a row per bucket (100) would make the rollup as large as the data.
    """

    period_start = models.DateTimeField()
    origin = models.CharField(max_length=10, choices=Trace.Origin.choices)
    agent_id = models.PositiveIntegerField()
    policy_version = models.CharField(max_length=40)
    bucket_band = models.PositiveSmallIntegerField()
    error_type = models.CharField(max_length=40)
    tokens = models.BigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=16, decimal_places=6, default=0)

    class Meta:
        abstract = True


class StepRollup(RollupDims):
    """Step counters per period, tool, normalised endpoint and error type."""

    tool_name = models.CharField(max_length=64)
    endpoint = models.CharField(max_length=300)
    steps = models.PositiveIntegerField(default=0)
    failed_steps = models.PositiveIntegerField(default=0)
    action_steps = models.PositiveIntegerField(default=0)
    # Tool calls that failed or were classified: the tools page's error rates.
    failed_action_steps = models.PositiveIntegerField(default=0)
    latency_ms_sum = models.BigIntegerField(default=0)

    KEY = (
        "period_start",
        "origin",
        "agent_id",
        "policy_version",
        "bucket_band",
        "tool_name",
        "endpoint",
        "error_type",
    )
    COUNTERS = (
        "steps",
        "failed_steps",
        "action_steps",
        "failed_action_steps",
        "latency_ms_sum",
        "tokens",
        "cost_usd",
    )

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.period_start:%Y-%m-%d %H:%M} {self.tool_name} {self.error_type}"


class RunRollup(RollupDims):
    """Finished-run counters per period; ``error_type`` is the run's own (blank if none)."""

    runs = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    first_response_successes = models.PositiveIntegerField(default=0)
    action_steps = models.PositiveIntegerField(default=0)
    resolution_ms_sum = models.BigIntegerField(default=0)
    handovers = models.PositiveIntegerField(default=0)

    KEY = ("period_start", "origin", "agent_id", "policy_version", "bucket_band", "error_type")
    COUNTERS = (
        "runs",
        "successes",
        "first_response_successes",
        "action_steps",
        "resolution_ms_sum",
        "handovers",
        "tokens",
        "cost_usd",
    )

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.period_start:%Y-%m-%d %H:%M} {self.policy_version} runs={self.runs}"


class StepRollupHourly(StepRollup):
    """Steps per UTC hour (the step's ``created_at``)."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=list(StepRollup.KEY), name="steprollup_hourly_key")
        ]
        # "New error types": the first period of each error type, without a table scan.
        indexes = [
            models.Index(
                fields=["error_type", "origin", "period_start"], name="steprollup_hourly_first"
            )
        ]


class StepRollupDaily(StepRollup):
    """Steps per UTC day; always the sum of the day's hourly rows."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=list(StepRollup.KEY), name="steprollup_daily_key")
        ]


class RunRollupHourly(RunRollup):
    """Runs per UTC hour of their end (``finished_at``)."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=list(RunRollup.KEY), name="runrollup_hourly_key")
        ]


class RunRollupDaily(RunRollup):
    """Runs per UTC day of their end; always the sum of the day's hourly rows."""

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=list(RunRollup.KEY), name="runrollup_daily_key")
        ]


class Job(models.Model):
    """A long piece of work (a reflexion batch, a replay, a benchmark) and how far it got.

    It lives in the lowest layer so that every layer that runs such work can report on it;
    the row only ever moves forward: running -> finished | failed.
    """

    class Kind(models.TextChoices):
        REFLEXION = "reflexion", "Reflexion batch"
        REPLAY = "replay", "Replay"
        BENCHMARK = "benchmark", "Benchmark"
        RETENTION = "retention", "Retention (old runs deleted)"

    class Status(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        FAILED = "failed"

    kind = models.CharField(max_length=12, choices=Kind.choices)
    name = models.CharField(max_length=120)
    status = models.CharField(
        max_length=10, choices=Status.choices, default=Status.RUNNING, db_index=True
    )
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0, help_text="0 when the size is not known yet.")
    message = models.CharField(max_length=300, blank=True)
    result_url = models.CharField(max_length=300, blank=True)
    started_at = models.DateTimeField(auto_now_add=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at", "-id"]

    def __str__(self) -> str:
        return f"{self.kind} {self.name} [{self.status}] {self.done}/{self.total}"

    @property
    def percent(self) -> int | None:
        if not self.total:
            return None
        return min(100, round(100 * self.done / self.total))


class TracePrune(models.Model):
    """One retention pass (``traces.retention``): which runs it deleted and when.

    The audit log of deletions, and the retention horizon: the latest ``cutoff`` of a pass
    that was not a dry run. Rows before it may be gone, so no rollup before it is rebuilt.
    """

    cutoff = models.DateTimeField(help_text="Ended runs created before this were deleted.")
    dry_run = models.BooleanField(default=False)
    traces_matched = models.PositiveIntegerField(default=0)
    traces_held = models.PositiveIntegerField(
        default=0, help_text="Ended runs before the cutoff that a hold kept."
    )
    traces_deleted = models.PositiveIntegerField(default=0)
    steps_deleted = models.PositiveBigIntegerField(default=0)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(
        null=True, blank=True, help_text="Blank while running, or if the pass was cut short."
    )

    class Meta:
        ordering = ["-started_at", "-id"]
        indexes = [models.Index(fields=["dry_run", "cutoff"], name="traceprune_horizon")]

    def __str__(self) -> str:
        return f"prune before {self.cutoff:%Y-%m-%d} ({self.traces_deleted} runs)"
