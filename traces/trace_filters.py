"""The trace list's filters, read from the URL so that a filtered list can be shared.

Run-level filters (status, outcome, the run's error type, origin, agent, policy version,
bucket band) match the trace. Step-level ones (``step_error``, ``tool``, ``endpoint``)
match traces with at least one step that meets all of them; ``since``/``until`` then bound
that step's time, as a failures-chart bar counts steps by their time. Without step-level
filters, ``since``/``until`` bound the trace's creation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import UTC, datetime
from urllib.parse import urlencode

from django.db.models import Exists, OuterRef, Q, QuerySet

from traces.dashboards import NONE_VALUE, ORIGIN_ALL, matches
from traces.models import ErrorType, Step, Trace
from traces.rollups import (
    BUCKET_BANDS,
    ID_PLACEHOLDER,
    bucket_band_range,
    endpoint_label_regex,
)

ANY_ERROR = "any"
# Filters the list's form has no control for: they arrive in links from the dashboards.
HIDDEN = ("agent", "policy_version", "bucket", "since", "until", "step_error", "tool", "endpoint")


def _moment(value: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value.strip().replace(" ", "+"))
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
        # In UTC, as the database compares it: year 1 at +14:00 is before year 1 there.
        return moment.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


def _endpoint_label(label: str) -> str:
    """A label as ``endpoint_label`` writes them, or "": each placeholder is a whole path
    segment there (one per segment). Any other use makes the filter's regex (run by
    Python's ``re`` on SQLite) backtrack on long digit runs, and matches nothing anyway."""
    if ID_PLACEHOLDER not in label:
        return label
    path = label.split("?", 1)[0].split("#", 1)[0]
    segments = path.split("/")
    if any(ID_PLACEHOLDER in seg and seg != ID_PLACEHOLDER for seg in segments):
        return ""
    return label


@dataclass(frozen=True)
class TraceListFilters:
    """Every filter of the trace list; blank means any, origin defaults to customers."""

    status: str = ""
    outcome: str = ""
    error_type: str = ""
    origin: str = Trace.Origin.CUSTOMER
    agent: str = ""
    policy_version: str = ""
    bucket: str = ""
    since: str = ""
    until: str = ""
    step_error: str = ""
    tool: str = ""
    endpoint: str = ""

    @classmethod
    def from_params(cls, params: Mapping[str, str]) -> TraceListFilters:
        """Keep the values that can be valid and drop the rest (never an error page)."""

        def pick(name: str, allowed: tuple[str, ...] | list[str]) -> str:
            value = params.get(name, "")
            return value if value in allowed else ""

        agent = params.get("agent", "")
        bucket = params.get("bucket", "")
        since, until = params.get("since", ""), params.get("until", "")
        return cls(
            status=pick("status", Trace.Status.values),
            outcome=pick("outcome", Trace.Outcome.values),
            error_type=pick("error_type", ErrorType.values),
            origin=pick("origin", [*Trace.Origin.values, ORIGIN_ALL]) or Trace.Origin.CUSTOMER,
            agent=agent if agent.isdigit() and len(agent) < 10 else "",
            policy_version=params.get("policy_version", "")[:40],
            bucket=bucket if bucket in {str(band) for band in BUCKET_BANDS} else "",
            since=since if _moment(since) else "",
            until=until if _moment(until) else "",
            step_error=pick("step_error", [*ErrorType.values, ANY_ERROR]),
            tool=params.get("tool", "")[:64],
            endpoint=_endpoint_label(params.get("endpoint", "")[:300]),
        )

    @property
    def hidden_params(self) -> list[tuple[str, str]]:
        """The filters the list's form has no control for (set by a dashboard link)."""
        return [(name, getattr(self, name)) for name in HIDDEN if getattr(self, name)]

    @property
    def has_step_filters(self) -> bool:
        return bool(self.step_error or self.tool or self.endpoint)

    def querystring(self) -> str:
        """The filters as a query string (defaults left out), for pager links."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        if values["origin"] == Trace.Origin.CUSTOMER:
            values["origin"] = ""
        return urlencode({name: value for name, value in values.items() if value})

    def apply(self, qs: QuerySet[Trace]) -> QuerySet[Trace]:
        if self.status:
            qs = qs.filter(status=self.status)
        if self.outcome:
            qs = qs.filter(outcome=self.outcome)
        if self.error_type:
            qs = qs.filter(error_type=self.error_type)
        if self.origin != ORIGIN_ALL:
            qs = qs.filter(origin=self.origin)
        if self.agent:
            qs = qs.filter(agent_id=int(self.agent))
        if self.policy_version:
            qs = qs.filter(matches("policy_version", self.policy_version))
        if self.bucket:
            low, high = bucket_band_range(int(self.bucket))
            qs = qs.filter(policy_bucket__gte=low, policy_bucket__lt=high)
        since, until = _moment(self.since), _moment(self.until)
        if not self.has_step_filters:
            if since:
                qs = qs.filter(created_at__gte=since)
            if until:
                qs = qs.filter(created_at__lt=until)
            return qs
        if self.step_error:
            # Only a failed step carries an error type (the runtime and the ingest classify
            # failures only), and a run that has ended stores how many it had: an ended run
            # without one is passed over without probing its steps.
            qs = qs.filter(Q(failed_steps__gt=0) | Q(finished_at__isnull=True))
        step = Q(trace=OuterRef("pk"))
        if self.step_error == ANY_ERROR:
            step &= ~Q(error_type="")
        elif self.step_error:
            step &= Q(error_type=self.step_error)
        if self.tool:
            step &= matches("tool_name", self.tool)
        if self.endpoint == NONE_VALUE:
            step &= Q(endpoint="")
        elif self.endpoint:
            step &= Q(endpoint__regex=endpoint_label_regex(self.endpoint))
        if since:
            step &= Q(created_at__gte=since)
        if until:
            step &= Q(created_at__lt=until)
        return qs.filter(Exists(Step.objects.filter(step)))
