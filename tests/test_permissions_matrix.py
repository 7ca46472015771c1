"""Who may use what: every URL pattern, every role, and the methods it serves.

The table below is explicit. A URL pattern without an entry fails
``test_every_url_pattern_has_an_expectation``, so a new page or endpoint cannot ship
without someone deciding who may open it. Django admin model pages follow one rule
(staff only; admin-role expectations per page kind) and are generated from the admin
registry; every other admin page has its own row.

Columns: anonymous, support, a second support user, ops, admin.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib import admin
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.authtoken.models import Token

from agents.models import CustomerFact, KnowledgeArticle, Tool, ToolAlert, ToolResultCache
from policies.experiments import experiment_create
from policies.models import PolicyVersion, ReflexionProposal, Rollout, Strategy
from policies.services import strategy_outcome_record
from reviews.models import ReviewItem
from reviews.services import review_item_approve
from sandbox.faults import fault_cache_clear
from sandbox.models import (
    Article,
    FaultRule,
    IdempotentRequest,
    Order,
    Product,
    ReturnRequest,
    ShopUser,
    Sku,
)
from sandbox.services import contractdrift_set, faultrule_set
from tests.policies.conftest import make_strategy  # noqa: F401
from traces.models import Feedback, Job, Step, Trace, TracePrune
from traces.rollups import rollups_record_steps
from traces.services import job_start, trace_create, trace_finish

pytestmark = pytest.mark.django_db

ROLES = ("anonymous", "support", "support2", "ops", "admin")
# None: not requested (the admin role's own writes in Django admin are Django's to test).
Statuses = tuple[int | None, int | None, int | None, int | None, int | None]

# DRF answers 401 to anonymous requests: its first authentication class (token) sends a
# `WWW-Authenticate: Token` challenge.
A = 401

PUBLIC: Statuses = (200, 200, 200, 200, 200)
SIGNED_IN: Statuses = (302, 200, 200, 200, 200)  # login_required, then every role
OPS_PAGE: Statuses = (302, 403, 403, 200, 200)
ADMIN_PAGE: Statuses = (302, 403, 403, 403, 200)  # agents.change_tool: the admin role
OWN_PAGE: Statuses = (302, 200, 404, 200, 200)  # a trace the first support user started
API: Statuses = (A, 200, 200, 200, 200)
API_OWN: Statuses = (A, 200, 404, 200, 200)
API_READ_ONLY: Statuses = (A, 405, 405, 405, 405)
FAULTS_READ: Statuses = (403, 403, 403, 200, 200)
STAFF_ONLY: Statuses = (302, 302, 302, 302, 200)  # non-staff go to the admin login
NO_GET: Statuses = (405, 405, 405, 405, 405)

FAULT_BODY = {"rate_404": 0.0, "seed": 3}
DRIFT_BODY = {"endpoint": "returns", "kind": "unavailable", "enabled": False}


@dataclass(frozen=True)
class Route:
    """A concrete request for one URL pattern and the status each role must get."""

    path: str  # filled from the world's ids with str.format
    expect: dict[str, Statuses]
    body: dict[str, Any] = field(default_factory=dict)
    form: bool = False  # HTML forms post form data; the APIs take JSON


ROUTES: dict[str, Route] = {
    # --- pages -----------------------------------------------------------------------
    "": Route(
        "/",
        {"GET": SIGNED_IN, "POST": (302, 302, 302, 302, 302)},
        {"query": "Where is my order?"},
        form=True,
    ),
    # The chat widget: without a session it links to the login (never a framed form).
    "chat/embed/": Route(
        "/chat/embed/",
        {"GET": PUBLIC, "POST": (200, 302, 302, 302, 302)},
        {"query": "Where is my order?"},
        form=True,
    ),
    "conversations/new/": Route(
        "/conversations/new/", {"GET": (302, 405, 405, 405, 405), "POST": (302,) * 5}, form=True
    ),
    # A personal history: only the person who had the conversation reopens it.
    "conversations/<str:session_id>/": Route(
        "/conversations/{conversation}/", {"GET": (302, 302, 404, 404, 404)}
    ),
    "runs/<uuid:trace_id>/handover/": Route(
        "/runs/{trace}/handover/",
        {"GET": (302, 405, 405, 405, 405), "POST": (302, 302, 404, 302, 302)},
        form=True,
    ),
    "reviews/feedback/<uuid:trace_id>/": Route(
        "/reviews/feedback/{trace}/",
        {"GET": (302, 405, 405, 405, 405), "POST": (302, 302, 404, 302, 302)},
        {"rating": "down"},
        form=True,
    ),
    "traces/": Route("/traces/", {"GET": SIGNED_IN}),
    "traces/<uuid:trace_id>/": Route("/traces/{trace}/", {"GET": OWN_PAGE}),
    "traces/<uuid:trace_id>/run/": Route("/traces/{trace}/run/", {"GET": OWN_PAGE}),
    "reviews/": Route("/reviews/", {"GET": OPS_PAGE}),
    "dashboards/": Route("/dashboards/", {"GET": OPS_PAGE}),
    "dashboards/failures/": Route("/dashboards/failures/", {"GET": OPS_PAGE}),
    "dashboards/data/kpis.json": Route("/dashboards/data/kpis.json", {"GET": OPS_PAGE}),
    "dashboards/data/runs.json": Route("/dashboards/data/runs.json", {"GET": OPS_PAGE}),
    "dashboards/data/failures.json": Route("/dashboards/data/failures.json", {"GET": OPS_PAGE}),
    "dashboards/data/breakdown.json": Route(
        "/dashboards/data/breakdown.json?by=tool", {"GET": OPS_PAGE}
    ),
    "reviews/audit/": Route("/reviews/audit/?action=review.approve", {"GET": ADMIN_PAGE}),
    "traces/jobs/": Route("/traces/jobs/", {"GET": OPS_PAGE}),
    "traces/jobs/partial/": Route("/traces/jobs/partial/?kind=replay", {"GET": OPS_PAGE}),
    "policies/": Route("/policies/", {"GET": OPS_PAGE}),
    "policies/versions/": Route("/policies/versions/", {"GET": OPS_PAGE}),
    "policies/versions/<int:number>/": Route("/policies/versions/{version}/", {"GET": OPS_PAGE}),
    "policies/versions/<int:number>/yaml/": Route(
        "/policies/versions/{version}/yaml/", {"GET": OPS_PAGE}
    ),
    "policies/diff/": Route("/policies/diff/?a={version}&b={version}", {"GET": OPS_PAGE}),
    "policies/strategies/<int:strategy_id>/": Route(
        "/policies/strategies/{strategy}/", {"GET": OPS_PAGE}
    ),
    "policies/experiments/": Route("/policies/experiments/", {"GET": OPS_PAGE}),
    # An empty form is refused with inline errors (400); a created draft redirects.
    "policies/experiments/new/": Route(
        "/policies/experiments/new/",
        {"GET": OPS_PAGE, "POST": (302, 403, 403, 400, 400)},
        form=True,
    ),
    "policies/experiments/<int:experiment_id>/": Route(
        "/policies/experiments/{experiment}/", {"GET": OPS_PAGE}
    ),
    # Start asks first on GET; a POST acts (or says why not) and redirects to the report.
    "policies/experiments/<int:experiment_id>/<slug:action>/": Route(
        "/policies/experiments/{experiment}/start/",
        {"GET": OPS_PAGE, "POST": (302, 403, 403, 302, 302)},
        form=True,
    ),
    "policies/rollouts/": Route("/policies/rollouts/", {"GET": OPS_PAGE}),
    "policies/rollouts/<int:rollout_id>/": Route(
        "/policies/rollouts/{rollout}/", {"GET": OPS_PAGE}
    ),
    "policies/rollouts/<int:rollout_id>/series/": Route(
        "/policies/rollouts/{rollout}/series/", {"GET": OPS_PAGE}
    ),
    # GET asks for confirmation; a confirmed move redirects back to the rollout (a second
    # pause is refused with a message, still a redirect).
    "policies/rollouts/<int:rollout_id>/<slug:action>/": Route(
        "/policies/rollouts/{rollout}/pause/",
        {"GET": OPS_PAGE, "POST": (302, 403, 403, 302, 302)},
        form=True,
    ),
    # An empty decision is refused with a message and a redirect: nothing is decided.
    "reviews/<int:item_id>/decide/": Route(
        "/reviews/{item}/decide/",
        {"GET": (302, 405, 405, 405, 405), "POST": (302, 403, 403, 302, 302)},
        form=True,
    ),
    # The tools page: an empty edit is refused with inline errors (400); a confirmed
    # action redirects back to the list.
    "tools/": Route("/tools/", {"GET": ADMIN_PAGE}),
    # Customer memory: support agents and ops (and admins) see and delete facts.
    "customers/<str:customer_id>/memory/": Route(
        "/customers/{customer}/memory/", {"GET": (302, 200, 200, 200, 200)}
    ),
    "customers/<str:customer_id>/memory/<int:fact_id>/delete/": Route(
        "/customers/{customer}/memory/{fact}/delete/",
        # The first support user's POST deletes the fact, so the later roles find none (404);
        # tests/agents/test_customer_memory.py checks each role deleting a fact of its own.
        {"GET": (302, 405, 405, 405, 405), "POST": (302, 302, 404, 404, 404)},
        form=True,
    ),
    # POST without a document re-renders the form with an error (400) for the admin role.
    "tools/import/": Route(
        "/tools/import/",
        {"GET": ADMIN_PAGE, "POST": (302, 403, 403, 403, 400)},
        form=True,
    ),
    "tools/<int:tool_id>/": Route(
        "/tools/{agents_tool}/",
        {"GET": ADMIN_PAGE, "POST": (302, 403, 403, 403, 400)},
        form=True,
    ),
    "tools/<int:tool_id>/<slug:action>/": Route(
        "/tools/{agents_tool}/disable/",
        {"GET": ADMIN_PAGE, "POST": (302, 403, 403, 403, 302)},
        form=True,
    ),
    # Opening an item claims its lock for the reviewer; support never sees it.
    "reviews/<int:item_id>/": Route("/reviews/{item}/", {"GET": OPS_PAGE}),
    # A rejection without its reason is refused on the item page (400): nothing is decided.
    "reviews/<int:item_id>/<slug:action>/": Route(
        "/reviews/{item}/reject/",
        {"GET": (302, 405, 405, 405, 405), "POST": (302, 403, 403, 400, 400)},
        form=True,
    ),
    # --- Django admin pages that are not per model --------------------------------------
    "admin/": Route("/admin/", {"GET": STAFF_ONLY, "POST": STAFF_ONLY}, form=True),
    # Signed-in staff are sent on to the index; the rest see the form (again, if empty).
    "admin/login/": Route(
        "/admin/login/", {"GET": (200, 200, 200, 200, 302), "POST": PUBLIC}, form=True
    ),
    "admin/logout/": Route(
        "/admin/logout/",
        {"GET": (302, 302, 302, 302, 405), "POST": (302,) * 5},
        form=True,
    ),
    "admin/password_change/": Route(
        "/admin/password_change/", {"GET": STAFF_ONLY, "POST": STAFF_ONLY}, form=True
    ),
    "admin/password_change/done/": Route("/admin/password_change/done/", {"GET": STAFF_ONLY}),
    # Without its query parameters the autocomplete refuses even staff.
    "admin/autocomplete/": Route("/admin/autocomplete/", {"GET": (302, 302, 302, 302, 403)}),
    "admin/jsi18n/": Route("/admin/jsi18n/", {"GET": STAFF_ONLY}),
    "admin/r/<path:content_type_id>/<path:object_id>/": Route(
        "/admin/r/{trace_ct}/{trace}/", {"GET": (302, 302, 302, 302, 302)}
    ),
    "admin/auth/user/<id>/password/": Route(
        "/admin/auth/user/{support_pk}/password/",
        {"GET": STAFF_ONLY, "POST": STAFF_ONLY},
        form=True,
    ),
    "admin/^(?P<app_label>auth|authtoken|agents|traces|policies|reviews|sandbox)/$": Route(
        "/admin/traces/", {"GET": STAFF_ONLY}
    ),
    "admin/(?P<url>.*)$": Route("/admin/no-such-page/", {"GET": (302, 302, 302, 302, 404)}),
    # --- accounts ------------------------------------------------------------------------
    "accounts/login/": Route("/accounts/login/", {"GET": PUBLIC, "POST": PUBLIC}, form=True),
    "accounts/logout/": Route("/accounts/logout/", {"GET": NO_GET, "POST": (302,) * 5}, form=True),
    "accounts/password_change/": Route(
        "/accounts/password_change/", {"GET": SIGNED_IN, "POST": SIGNED_IN}, form=True
    ),
    "accounts/password_change/done/": Route("/accounts/password_change/done/", {"GET": SIGNED_IN}),
    "accounts/password_reset/": Route(
        "/accounts/password_reset/", {"GET": PUBLIC, "POST": PUBLIC}, form=True
    ),
    "accounts/password_reset/done/": Route("/accounts/password_reset/done/", {"GET": PUBLIC}),
    "accounts/reset/<uidb64>/<token>/": Route("/accounts/reset/MQ/bad-token/", {"GET": PUBLIC}),
    "accounts/reset/done/": Route("/accounts/reset/done/", {"GET": PUBLIC}),
    # --- REST API ------------------------------------------------------------------------
    "api/runs/": Route(
        "/api/runs/",
        {"GET": API_READ_ONLY, "POST": (A, 202, 202, 202, 202)},
        {"query": "Where is my order?"},
    ),
    "api/^traces/$": Route("/api/traces/", {"GET": API, "POST": API_READ_ONLY}),
    "api/^traces/(?P<pk>[^/]+)/$": Route(
        "/api/traces/{trace}/", {"GET": API_OWN, "PUT": API_READ_ONLY, "DELETE": API_READ_ONLY}
    ),
    "api/^traces/(?P<pk>[^/]+)/steps/$": Route(
        "/api/traces/{trace}/steps/", {"GET": API_OWN, "POST": API_READ_ONLY}
    ),
    "api/^steps/$": Route("/api/steps/", {"GET": API, "POST": API_READ_ONLY}),
    "api/^steps/(?P<pk>[^/]+)/$": Route(
        "/api/steps/{step}/", {"GET": API_OWN, "PUT": API_READ_ONLY, "DELETE": API_READ_ONLY}
    ),
    "api/": Route("/api/", {"GET": API}),
    # OTLP/HTTP ingest: ops and admins (traces.ingest_traces); an empty export is a 200.
    "otlp/v1/traces": Route(
        "/otlp/v1/traces", {"GET": (A, 403, 403, 405, 405), "POST": (A, 403, 403, 200, 200)}, {}
    ),
    # The API's schema and docs: any signed-in user or token holder, nobody else.
    "api/schema/": Route("/api/schema/", {"GET": (A, 200, 200, 200, 200)}),
    # The health check: open to a load balancer's probe; it says only whether the database
    # answers.
    "healthz": Route("/healthz", {"GET": PUBLIC, "POST": NO_GET}),
    # The icon browsers ask for: a redirect to the static one, for everyone.
    "favicon.ico": Route("/favicon.ico", {"GET": (301,) * 5}),
    # Unknown API paths are the API's JSON 404 for everyone, signed in or not.
    "^api/": Route("/api/no-such-endpoint/", {"GET": (404,) * 5, "POST": (404,) * 5}),
    "api/docs/": Route("/api/docs/", {"GET": (A, 200, 200, 200, 200)}),
    # --- the sandbox shop: the agents' external system, open like a public API ------------
    "sandbox/api/users/<str:user_id>": Route(
        "/sandbox/api/users/{shop_user}", {"GET": PUBLIC, "POST": NO_GET}
    ),
    "sandbox/api/users/<str:user_id>/orders": Route(
        "/sandbox/api/users/{shop_user}/orders", {"GET": PUBLIC}
    ),
    "sandbox/api/orders/<str:order_id>": Route(
        "/sandbox/api/orders/{order}", {"GET": PUBLIC, "DELETE": NO_GET}
    ),
    "sandbox/api/openapi.json": Route("/sandbox/api/openapi.json", {"GET": PUBLIC}),
    "sandbox/api/products": Route("/sandbox/api/products?q=a", {"GET": PUBLIC}),
    "sandbox/api/products/<str:product_id>": Route(
        "/sandbox/api/products/{product}", {"GET": PUBLIC}
    ),
    "sandbox/api/skus/<str:sku>": Route("/sandbox/api/skus/{sku}", {"GET": PUBLIC}),
    "sandbox/api/inventory/<str:sku>": Route("/sandbox/api/inventory/{sku}", {"GET": PUBLIC}),
    "sandbox/api/promotions": Route(
        "/sandbox/api/promotions?product_id={product}", {"GET": PUBLIC}
    ),
    # An empty return request is refused on its content, for everyone alike.
    "sandbox/api/returns": Route(
        "/sandbox/api/returns", {"GET": NO_GET, "POST": (400, 400, 400, 400, 400)}
    ),
    "sandbox/api/returns/<str:order_id>": Route("/sandbox/api/returns/{order}", {"GET": PUBLIC}),
    "sandbox/api/articles": Route("/sandbox/api/articles?q=return", {"GET": PUBLIC}),
    "sandbox/api/articles/<str:slug>": Route("/sandbox/api/articles/{article}", {"GET": PUBLIC}),
    # --- the fault API: ops and admins only ------------------------------------------------
    "sandbox/api/_faults": Route(
        "/sandbox/api/_faults", {"GET": FAULTS_READ, "POST": (405, 405, 405, 405, 405)}
    ),
    "sandbox/api/_faults/<str:endpoint>": Route(
        "/sandbox/api/_faults/returns",
        {
            "GET": FAULTS_READ,
            "PUT": FAULTS_READ,
            "PATCH": FAULTS_READ,
            "DELETE": FAULTS_READ,
        },
        FAULT_BODY,
    ),
    # --- the contract-drift API: the same permission as the fault API ---------------------
    "sandbox/api/_drifts": Route(
        "/sandbox/api/_drifts",
        {"GET": FAULTS_READ, "POST": (403, 403, 403, 201, 201), "DELETE": FAULTS_READ},
        DRIFT_BODY,
    ),
    "sandbox/api/_drifts/<int:drift_id>": Route(
        "/sandbox/api/_drifts/{sandbox_contractdrift}",
        {"GET": FAULTS_READ, "PATCH": FAULTS_READ, "DELETE": FAULTS_READ},
        {"layout": "problem"},
    ),
    "sandbox/api/^(?P<rest>.*)$": Route(
        "/sandbox/api/no-such-endpoint", {"GET": (404,) * 5, "POST": (404,) * 5}
    ),
}

# Django admin model pages: staff only. What the admin role then gets depends on the page.
ADMIN_MODEL_PAGES = {
    "": ("changelist", 200),
    "add/": ("add", 200),
    "<path:object_id>/history/": ("history", 200),
    "<path:object_id>/delete/": ("delete", 200),
    "<path:object_id>/change/": ("change", 200),
    "<path:object_id>/": ("redirect", 302),  # the old change URL, redirected
}
# Policy versions are immutable and the audit log is written by the system only.
# Experiments change state on their own page, which checks the state and audits it.
# Rollup rows are counts kept by the writers: nobody adds or edits them by hand.
ADMIN_REFUSED = {
    ("policies.policyversion", "add"),
    ("reviews.auditlog", "add"),
    ("policies.strategyconfidenceevent", "add"),
    ("policies.experiment", "add"),
    ("policies.rollout", "add"),
    ("policies.rolloutdecision", "add"),
    ("traces.job", "add"),
    # Retention passes are the audit log of deletions: written by the pass, never edited.
    ("traces.traceprune", "add"),
    ("traces.traceprune", "delete"),
    # Customer facts are learned by runs and deleted (audited) on the customer memory page.
    ("agents.customerfact", "add"),
    ("agents.customerfact", "delete"),
    # The sandbox records side-effecting requests by their Idempotency-Key itself.
    ("sandbox.idempotentrequest", "add"),
    *(
        (f"traces.{name}", "add")
        for name in ("steprolluphourly", "steprollupdaily", "runrolluphourly", "runrollupdaily")
    ),
}


def _admin_model_routes() -> dict[str, Route]:
    routes = {}
    for model in admin.site._registry:
        label = model._meta.label_lower
        base = f"admin/{model._meta.app_label}/{model._meta.model_name}/"
        for suffix, (kind, admin_status) in ADMIN_MODEL_PAGES.items():
            status = 403 if (label, kind) in ADMIN_REFUSED else admin_status
            path = (
                "/" + base + suffix.replace("<path:object_id>", "{" + label.replace(".", "_") + "}")
            )
            routes[base + suffix] = Route(
                path,
                {"GET": (302, 302, 302, 302, status), "POST": (302, 302, 302, 302, None)},
                form=True,
            )
    return routes


ALL_ROUTES = {**ROUTES, **_admin_model_routes()}


def _url_patterns(patterns: list[Any], prefix: str = "") -> list[str]:
    found = []
    for pattern in patterns:
        route = prefix + str(pattern.pattern)
        if isinstance(pattern, URLResolver):
            found += _url_patterns(pattern.url_patterns, route)
        else:
            assert isinstance(pattern, URLPattern)
            found.append(route)
    return found


def test_every_url_pattern_has_an_expectation() -> None:
    patterns = _url_patterns(get_resolver().url_patterns)

    assert len(patterns) == len(set(patterns))
    assert sorted(set(patterns) - set(ALL_ROUTES)) == []
    assert sorted(set(ALL_ROUTES) - set(patterns)) == []


@pytest.fixture
def world(
    support_user: Any,
    support_user2: Any,
    ops_user: Any,
    admin_role_user: Any,
    support_agent: Any,
    small_shop: Any,
    error_rules: None,
    make_strategy: Any,  # noqa: F811
) -> dict[str, Any]:
    """Real objects for every URL kwarg, and at least one row of every admin model."""
    fault_cache_clear()
    trace = trace_create(
        agent_id=support_agent.pk,
        query="Where is my order?",
        llm_backend="simulated",
        created_by_id=support_user.pk,
    )
    step = Step.objects.create(
        trace=trace, step_number=1, phase="reasoning", started_at=timezone.now()
    )
    trace_finish(trace_id=str(trace.pk), status="finished", final_answer="It shipped.")
    rollups_record_steps(steps=[step])
    Feedback.objects.create(trace=trace, user=support_user, rating=Feedback.Rating.UP)
    trace_create(
        agent_id=support_agent.pk,
        query="Is the Aurora jacket in stock?",
        llm_backend="simulated",
        created_by_id=support_user.pk,
        session_id="s-world",
        source="chat",
    )
    open_item = ReviewItem.objects.create(
        strategy=make_strategy(status=Strategy.Status.IN_REVIEW),
        reason=ReviewItem.Reason.LOW_CONFIDENCE,
    )
    decided = ReviewItem.objects.create(
        strategy=make_strategy(
            status=Strategy.Status.IN_REVIEW,
            branch={"tool": "get_sku", "field": "sku", "transform": "upper"},
        ),
        reason=ReviewItem.Reason.LOW_CONFIDENCE,
    )
    review_item_approve(item_id=decided.pk, user=ops_user, note="publish a version")
    strategy_outcome_record(strategy_id=decided.strategy_id, success=True, trace_id=str(trace.pk))
    job_start(kind=Job.Kind.REPLAY, name="replay for the matrix", total=1)
    TracePrune.objects.create(cutoff=timezone.now() - timedelta(days=30), dry_run=True)
    tool = Tool.objects.order_by("pk").first()
    assert tool is not None
    ToolAlert.objects.create(tool=tool, kind=ToolAlert.Kind.SUSPENDED, message="timeouts")
    ToolResultCache.objects.create(signature="s" * 64, tool_name=tool.name, body="{}")
    KnowledgeArticle.objects.create(slug="returns", title="Returns", body="30 days.")
    Token.objects.create(user=support_user)
    ReflexionProposal.objects.create(
        trace=trace,
        error_type="TIMEOUT",
        error_signature="get_order:TIMEOUT",
        origin="test",
        payload={},
        outcome=ReflexionProposal.Outcome.values[0],
    )
    fact = CustomerFact.objects.create(
        customer_id="U00000001", key="language", fact="Wants answers in German.", source_trace=trace
    )
    experiment = experiment_create(name="learned strategies vs none", actor=ops_user)
    # A rule that injects nothing: the shop routes above must answer normally.
    faultrule_set(endpoint="returns", enabled=False)
    contractdrift_set(endpoint="returns", kind="unavailable", enabled=False)
    IdempotentRequest.objects.create(
        key="matrix-world",
        endpoint="returns_create",
        fingerprint="0" * 64,
        status=201,
        body=b"{}",
        content_type="application/json",
    )
    order = Order.objects.order_by("order_id").first()
    assert order is not None
    assert ReturnRequest.objects.exists()
    ids: dict[str, Any] = {
        "trace": trace.pk,
        "step": step.pk,
        "customer": fact.customer_id,
        "fact": fact.pk,
        "conversation": "s-world",
        "item": open_item.pk,
        # the approval above started a canary: its version exists, inactive
        "version": PolicyVersion.objects.order_by("-number").values_list("number", flat=True)[0],
        "rollout": Rollout.objects.get().pk,
        "strategy": decided.strategy_id,
        "experiment": experiment.pk,
        "support_pk": support_user.pk,
        "trace_ct": ContentType.objects.get_for_model(Trace).pk,
        "shop_user": ShopUser.objects.order_by("user_id").values_list("user_id", flat=True)[0],
        "order": quote(order.order_id, safe=""),
        "product": Product.objects.order_by("product_id").first().product_id,  # type: ignore[union-attr]
        "sku": Sku.objects.order_by("sku").first().sku,  # type: ignore[union-attr]
        "article": Article.objects.order_by("slug").first().slug,  # type: ignore[union-attr]
    }
    for model in admin.site._registry:
        obj = model._default_manager.order_by("pk").first()
        assert obj is not None, f"the matrix needs a {model._meta.label} row"
        ids[model._meta.label_lower.replace(".", "_")] = quote(str(obj.pk), safe="")
    assert PolicyVersion.objects.exists() and Group.objects.filter(name="admin").exists()
    assert FaultRule.objects.count() == 1
    return {
        "ids": ids,
        "users": {
            "anonymous": None,
            "support": support_user,
            "support2": support_user2,
            "ops": ops_user,
            "admin": admin_role_user,
        },
    }


def _request(route: Route, method: str, user: Any, ids: dict[str, Any]) -> int:
    client = Client()
    if user is not None:
        client.force_login(user)
    path = route.path.format(**ids)
    send = getattr(client, method.lower())
    if method == "GET":
        return send(path).status_code
    if route.form:
        return client.post(path, route.body).status_code
    return send(path, data=route.body, content_type="application/json").status_code


@pytest.mark.parametrize("pattern", sorted(ALL_ROUTES))
def test_each_role_gets_the_expected_status(pattern: str, world: dict[str, Any]) -> None:
    route = ALL_ROUTES[pattern]
    expected = {
        (method, role): status
        for method, statuses in route.expect.items()
        for role, status in zip(ROLES, statuses, strict=True)
        if status is not None
    }

    actual = {
        (method, role): _request(route, method, world["users"][role], world["ids"])
        for method, role in expected
    }

    assert actual == expected
