"""Agents, the tools they may call, and tool alerts."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models
from django.urls import reverse
from django.utils import timezone

from agents.tools.credentials import ToolAuthInvalid, tool_auth_parse
from agents.tools.endpoints import endpoint_template_problem


class Agent(models.Model):
    """A configured assistant: which tools it may call and how its loop is bounded."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    description = models.TextField(blank=True)
    max_iterations = models.PositiveSmallIntegerField(default=8)
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]
        permissions = [("start_run", "Can chat with the assistant and start runs through the API")]

    def __str__(self) -> str:
        return self.name


class Tool(models.Model):
    """A whitelisted tool. The endpoint comes from this row, never from the model."""

    class Kind(models.TextChoices):
        HTTP = "http", "HTTP endpoint"
        PYTHON = "python", "In-process Python function"

    class Method(models.TextChoices):
        GET = "GET"
        POST = "POST"
        PUT = "PUT"
        PATCH = "PATCH"
        DELETE = "DELETE"

    class Source(models.TextChoices):
        CODE = "code", "Declared in code (tools_sync)"
        IMPORT = "import", "Imported from an OpenAPI or function-calling document"

    class Location(models.TextChoices):
        PATH = "path"
        QUERY = "query"
        BODY = "body"

    name = models.CharField(
        max_length=64, unique=True, help_text="Identifier the model uses, e.g. get_order."
    )
    description = models.TextField(
        help_text="Scenario-style: when should the agent use this tool and what it returns."
    )
    kind = models.CharField(max_length=10, choices=Kind.choices, default=Kind.HTTP)
    params_schema = models.JSONField(default=dict, help_text="JSON Schema of the arguments.")
    endpoint_template = models.CharField(
        max_length=500,
        blank=True,
        help_text=(
            "e.g. {sandbox}/orders/{order_id}; {sandbox} is SANDBOX_BASE_URL. Scheme, host "
            "and port must be fixed; placeholders only in the path or query."
        ),
    )
    method = models.CharField(max_length=6, choices=Method.choices, default=Method.GET)
    timeout_seconds = models.FloatField(default=3.0)
    key_fields = models.JSONField(
        default=list, blank=True, help_text="Fields kept when reducing a JSON observation."
    )
    query_map = models.JSONField(
        default=dict, blank=True, help_text="Argument name -> query-string name."
    )
    adapters = models.JSONField(
        default=list, blank=True, help_text="Semantic-gap adapters enabled for this tool."
    )
    auth = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            'Credential by environment-variable name, e.g. {"type": "bearer", "env": '
            '"SHOP_API_KEY"}, {"type": "header", "name": "X-Api-Key", "env": "SHOP_API_KEY"} '
            'or {"type": "query", "name": "api_key", "env": "SHOP_API_KEY"}. The secret '
            "itself stays in the worker's environment."
        ),
    )
    param_locations = models.JSONField(
        default=dict,
        blank=True,
        help_text=(
            'Argument name -> "path", "query" or "body" (set by tools import). Empty: GET '
            "sends the non-path arguments as the query string, other methods as a JSON body."
        ),
    )
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.CODE)
    import_origin = models.CharField(
        max_length=200, blank=True, help_text="The document an imported tool came from."
    )
    enabled = models.BooleanField(default=True)
    allowed_agents = models.ManyToManyField(Agent, related_name="tools", blank=True)
    suspended_until = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("agents:tool_edit", args=[self.pk])

    def clean(self) -> None:
        if self.kind == self.Kind.HTTP:
            problem = endpoint_template_problem(self.endpoint_template)
            if problem:
                raise ValidationError({"endpoint_template": problem})
        try:
            auth = tool_auth_parse(self.auth)
        except ToolAuthInvalid as exc:
            raise ValidationError({"auth": str(exc)}) from exc
        if auth is not None and self.kind != self.Kind.HTTP:
            raise ValidationError({"auth": "Only HTTP tools send credentials."})
        if not isinstance(self.params_schema, dict) or self.params_schema.get("type") != "object":
            raise ValidationError({"params_schema": 'Must be a JSON Schema with "type": "object".'})
        from agents.tools.tool_import import RESERVED_NAMES, schema_refs_problem

        if self.name in RESERVED_NAMES:
            raise ValidationError({"name": f"{self.name!r} is an action of the runtime's own."})
        problem = schema_refs_problem(self.params_schema)
        if problem:
            raise ValidationError({"params_schema": problem})
        from agents.tools.adapters import ADAPTERS

        unknown = [name for name in self.adapters or [] if name not in ADAPTERS]
        if unknown:
            raise ValidationError(
                {"adapters": f"Unknown adapters {unknown}; known: {sorted(ADAPTERS)}."}
            )
        locations = self.param_locations or {}
        if not isinstance(locations, dict) or any(
            value not in self.Location.values for value in locations.values()
        ):
            raise ValidationError(
                {"param_locations": 'Each argument goes to "path", "query" or "body".'}
            )
        if self.timeout_seconds <= 0 or self.timeout_seconds > 60:
            raise ValidationError({"timeout_seconds": "Between 0 and 60 seconds."})

    def is_suspended(self, now: datetime | None = None) -> bool:
        return bool(self.suspended_until and self.suspended_until > (now or timezone.now()))


class ToolAlert(models.Model):
    """An operational alert about a tool, e.g. suspended after repeated timeouts."""

    class Kind(models.TextChoices):
        SUSPENDED = "suspended", "Suspended after timeouts"
        UNSUSPENDED = "unsuspended", "Suspension lifted by an admin"

    tool = models.ForeignKey(Tool, on_delete=models.CASCADE, related_name="alerts")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    message = models.TextField()
    details = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.tool.name}: {self.kind}"


class ToolResultCache(models.Model):
    """The last successful result of each tool call signature: what degrade handlers serve."""

    signature = models.CharField(max_length=64, unique=True)
    tool_name = models.CharField(max_length=64, db_index=True)
    arguments = models.JSONField(default=dict)
    body = models.TextField()
    status_code = models.PositiveSmallIntegerField(default=200)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]

    def __str__(self) -> str:
        return f"cache {self.tool_name} {self.arguments}"


class KnowledgeArticle(models.Model):
    """A help article (FAQ or policy) the Self-RAG mode retrieves and answers from.

    Rows with ``source="sandbox"`` are copied from the sandbox help centre by ``kb_sync``;
    rows with ``source="admin"`` are written by staff. Only published rows are searched.
    """

    class Category(models.TextChoices):
        FAQ = "faq", "FAQ"
        POLICY = "policy", "Policy"
        OTHER = "other", "Other"

    class Source(models.TextChoices):
        SANDBOX = "sandbox", "Synced from the sandbox"
        ADMIN = "admin", "Written in admin"

    slug = models.SlugField(max_length=80, unique=True)
    title = models.CharField(max_length=200)
    category = models.CharField(max_length=10, choices=Category.choices, default=Category.FAQ)
    body = models.TextField()
    source = models.CharField(max_length=10, choices=Source.choices, default=Source.ADMIN)
    is_published = models.BooleanField(default=True, db_index=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.title

    def get_absolute_url(self) -> str:
        return reverse("admin:agents_knowledgearticle_change", args=[self.pk])


class CustomerFact(models.Model):
    """Something learned about a customer in a conversation, e.g. "Prefers contact by
    email.", kept for their later runs. ``fact`` is one of ``agents.memory``'s fixed
    sentences, never the customer's own words; ``key`` makes it unique per customer."""

    customer_id = models.CharField(max_length=64, db_index=True)
    key = models.CharField(max_length=64)
    fact = models.CharField(max_length=200)
    source_trace = models.ForeignKey(
        "traces.Trace", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["customer_id", "key"]
        constraints = [
            models.UniqueConstraint(fields=["customer_id", "key"], name="customerfact_unique_key")
        ]

    def __str__(self) -> str:
        return f"{self.customer_id}: {self.fact}"
