"""Staff pages of the runtime: the chat assistant, its embeddable widget and its actions,
and the admins' tools page."""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.template.defaultfilters import pluralize
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_http_methods, require_POST

from agents.forms import ChatForm, ToolEditForm, ToolImportForm
from agents.models import CustomerFact, Tool
from agents.selectors import (
    ERROR_WINDOWS,
    MANAGE_TOOLS,
    tool_alerts_recent,
    tool_error_rates,
    tools_for_admin,
)
from agents.services import (
    START_RUN,
    TooManyRunsInFlight,
    agent_ensure_default,
    customer_fact_delete,
    run_admission_check,
    run_start,
    tool_set_enabled,
    tool_unsuspend,
    tool_update,
    tools_import,
)
from agents.tools.tool_import import ToolImportError
from traces.selectors import conversation_exists, conversations_of, runs_for_chat
from traces.services import trace_handover
from traces.views import run_answer_response

SESSION_KEY = "chat_session"
# A CSP source: scheme://host[:port], a wildcard subdomain allowed; nothing that could
# end the directive.
_ORIGIN = re.compile(r"^(https?://)?(\*\.)?[A-Za-z0-9.-]+(:\d{1,5})?$")


def _session_key(request: HttpRequest) -> str:
    if SESSION_KEY not in request.session:
        request.session[SESSION_KEY] = uuid.uuid4().hex
    return request.session[SESSION_KEY]


def _chat(request: HttpRequest, *, template: str, here: str) -> HttpResponse:
    session_id = _session_key(request)
    form = ChatForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            run_admission_check(user_id=request.user.pk)
        except TooManyRunsInFlight as exc:
            form.add_error(None, str(exc))
    if request.method == "POST" and form.is_valid():
        run_start(
            agent=agent_ensure_default(),
            query=form.cleaned_data["query"],
            customer_id=form.cleaned_data["customer_id"],
            session_id=session_id,
            user_id=request.user.pk,
            source="chat",
        )
        return redirect(here)
    runs = list(
        runs_for_chat(user=request.user)
        .filter(session_id=session_id)
        .prefetch_related("steps")
        .order_by("-created_at")[:10]
    )
    runs.reverse()
    context = {
        "form": form,
        "runs": runs,
        "conversations": conversations_of(user=request.user),
        "current_conversation": session_id,
        "return_to": here,
        "refresh": any(not run.is_terminal for run in runs),
    }
    return render(request, template, context)


@login_required
@permission_required(START_RUN, raise_exception=True)
@require_http_methods(["GET", "POST"])
def chat(request: HttpRequest) -> HttpResponse:
    """Ask the assistant; each question becomes a run whose steps stream in below."""
    return _chat(request, template="agents/chat.html", here=reverse("agents:chat"))


def _allow_framing(response: HttpResponse) -> HttpResponse:
    origins = [o for o in settings.CHAT_EMBED_ALLOWED_ORIGINS if _ORIGIN.match(o)]
    response["Content-Security-Policy"] = "frame-ancestors " + " ".join(["'self'", *origins])
    return response


@xframe_options_exempt
@require_http_methods(["GET", "POST"])
def chat_embed(request: HttpRequest) -> HttpResponse:
    """The chat as a widget for another page's iframe; only the listed origins may frame it.

    The login form is never framed (a framed password form invites clickjacking): a
    visitor without a session gets a link that opens it in a new tab.
    """
    if not request.user.is_authenticated:
        response = render(request, "agents/chat_embed_login.html", status=200)
    elif not request.user.has_perm(START_RUN):
        response = render(request, "403.html", status=403)
    else:
        response = _chat(request, template="agents/chat_embed.html", here=reverse("agents:embed"))
    return _allow_framing(response)


@login_required
@permission_required(START_RUN, raise_exception=True)
def conversation_open(request: HttpRequest, session_id: str) -> HttpResponse:
    """Continue one of the user's own earlier conversations."""
    if not conversation_exists(user=request.user, session_id=session_id):
        raise Http404("No such conversation.")
    request.session[SESSION_KEY] = session_id
    return redirect("agents:embed" if request.GET.get("embed") else "agents:chat")


@login_required
@permission_required(START_RUN, raise_exception=True)
@require_POST
def conversation_new(request: HttpRequest) -> HttpResponse:
    request.session[SESSION_KEY] = uuid.uuid4().hex
    return redirect("agents:embed" if request.POST.get("embed") else "agents:chat")


@login_required
@permission_required(START_RUN, raise_exception=True)
@require_POST
def run_handover(request: HttpRequest, trace_id: str) -> HttpResponse:
    """Hand the conversation of this run over to a person (counted as a takeover)."""
    run = get_object_or_404(runs_for_chat(user=request.user), pk=trace_id)
    trace_handover(trace_id=str(run.pk), user_id=request.user.pk)
    return run_answer_response(request, trace_id=str(run.pk))


def _admins_only(view: Callable[..., HttpResponse]) -> Callable[..., HttpResponse]:
    """The tool whitelist's pages: a 403 that says who they are for."""

    @functools.wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not request.user.has_perm(MANAGE_TOOLS):
            raise PermissionDenied("Only admins manage the tool whitelist.")
        return view(request, *args, **kwargs)

    return wrapped


def _error_window(request: HttpRequest) -> str:
    window = request.GET.get("window", "")
    return window if window in ERROR_WINDOWS else next(iter(ERROR_WINDOWS))


@login_required
@_admins_only
@require_http_methods(["GET"])
def tool_list(request: HttpRequest) -> HttpResponse:
    """The whitelist: every tool, who may call it, its state and its recent error rate."""
    window = _error_window(request)
    now = timezone.now()
    tools = list(tools_for_admin())
    rates = tool_error_rates(
        tool_names=[tool.name for tool in tools], since=now - ERROR_WINDOWS[window], until=now
    )
    rows = [
        {"tool": tool, "rate": rates[tool.name], "suspended": tool.is_suspended(now)}
        for tool in tools
    ]
    return render(
        request,
        "agents/tools.html",
        {"rows": rows, "window": window, "windows": list(ERROR_WINDOWS)},
    )


def _add_model_errors(form: ToolEditForm, exc: ValidationError) -> None:
    # Tool.clean() also checks fields this page does not edit (auth, adapters): those
    # errors go above the form, the rest next to their field.
    if not hasattr(exc, "error_dict"):
        form.add_error(None, exc)
        return
    for name, errors in exc.error_dict.items():
        if name in form.fields:
            form.add_error(name, errors)
        else:
            form.add_error(None, [f"{name}: {message}" for e in errors for message in e])


@login_required
@_admins_only
@require_http_methods(["GET", "POST"])
def tool_edit(request: HttpRequest, tool_id: int) -> HttpResponse:
    """Edit a tool's description, endpoint, method, timeout, schema and allowed agents."""
    tool = get_object_or_404(Tool, pk=tool_id)
    if request.method == "POST":
        form = ToolEditForm(request.POST, tool=tool)
        if form.is_valid():
            try:
                tool_update(tool_id=tool.pk, actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                _add_model_errors(form, exc)
            else:
                messages.success(request, f"{tool.name} saved.")
                return redirect("agents:tool_edit", tool_id=tool.pk)
    else:
        form = ToolEditForm(initial=ToolEditForm.initial_for(tool), tool=tool)
    window = _error_window(request)
    now = timezone.now()
    rate = tool_error_rates(tool_names=[tool.name], since=now - ERROR_WINDOWS[window], until=now)[
        tool.name
    ]
    return render(
        request,
        "agents/tools_edit.html",
        {
            "tool": tool,
            "form": form,
            "alerts": tool_alerts_recent(tool=tool),
            "suspended": tool.is_suspended(now),
            "rate": rate,
            "window": window,
        },
        status=400 if form.errors else 200,
    )


# The state changes the page offers: each asks for confirmation on GET and acts on POST.
TOOL_ACTIONS = {
    "disable": "Disable",
    "enable": "Enable",
    "unsuspend": "Lift the suspension of",
}


@login_required
@_admins_only
@require_http_methods(["GET", "POST"])
def tool_action(request: HttpRequest, tool_id: int, action: str) -> HttpResponse:
    """Confirm, then enable, disable or un-suspend a tool (each change is audited)."""
    if action not in TOOL_ACTIONS:
        raise Http404("No such tool action.")
    tool = get_object_or_404(Tool, pk=tool_id)
    if request.method == "GET":
        return render(
            request,
            "agents/tools_confirm.html",
            {"tool": tool, "action": action, "verb": TOOL_ACTIONS[action]},
        )
    if action == "unsuspend":
        tool_unsuspend(tool_id=tool.pk, actor=request.user)
        messages.success(request, f"{tool.name}: suspension lifted.")
    else:
        tool_set_enabled(tool_id=tool.pk, enabled=action == "enable", actor=request.user)
        messages.success(
            request,
            f"{tool.name} {action}d: runs started from now on "
            f"{'can' if action == 'enable' else 'cannot'} call it.",
        )
    if request.POST.get("next") == "edit":
        return redirect(tool.get_absolute_url())
    return redirect("agents:tools")


@login_required
@_admins_only
@require_http_methods(["GET", "POST"])
def tool_import(request: HttpRequest) -> HttpResponse:
    """Upload an OpenAPI document or function list, preview the tools, then confirm.

    The preview is a dry run; the confirm posts the document back and it is checked again.
    Imported tools are disabled until enabled on the tools page; each row written is
    audited."""
    bound = request.method == "POST"
    form = ToolImportForm(request.POST if bound else None, request.FILES if bound else None)
    context: dict[str, object] = {"form": form}
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        confirm = request.POST.get("confirm") == "1" and not data.get("file")
        try:
            result = tools_import(
                raw=data["document"],
                base_url=data["base_url"] or "",
                origin=data["origin"] or "upload",
                actor=request.user,
                dry_run=not confirm,
            )
        except ToolImportError as exc:
            context["problems"] = exc.problems
        else:
            if confirm:
                messages.success(
                    request,
                    f"Imported {len(result.specs)} tool{pluralize(len(result.specs))} "
                    f"({len(result.created)} new, "
                    f"{len(result.updated)} updated). New tools stay disabled until you enable "
                    "them and choose their agents.",
                )
                return redirect("agents:tools")
            state = {name: "new" for name in result.created}
            state.update({name: "updated" for name in result.updated})
            state.update({name: "unchanged" for name in result.unchanged})
            context["preview"] = [
                {"spec": spec, "state": state[spec.name]} for spec in result.specs
            ]
            context["document"] = data["document"]
            context["origin"] = data["origin"] or "upload"
            context["base_url"] = data["base_url"] or ""
    status = 400 if form.errors or context.get("problems") else 200
    return render(request, "agents/tools_import.html", context, status=status)


@login_required
@permission_required("agents.view_customerfact", raise_exception=True)
@require_http_methods(["GET"])
def customer_memory(request: HttpRequest, customer_id: str) -> HttpResponse:
    """What the assistant remembers about one customer, each fact with its source run."""
    facts = CustomerFact.objects.filter(customer_id=customer_id).order_by("created_at", "pk")
    return render(
        request,
        "agents/customer_memory.html",
        {
            "customer_id": customer_id,
            "facts": facts,
            "can_delete": request.user.has_perm("agents.delete_customerfact"),
        },
    )


@login_required
@permission_required("agents.delete_customerfact", raise_exception=True)
@require_POST
def customer_memory_delete(request: HttpRequest, customer_id: str, fact_id: int) -> HttpResponse:
    """Forget one fact (audited); later runs for the customer no longer see it."""
    fact = get_object_or_404(CustomerFact, pk=fact_id, customer_id=customer_id)
    customer_fact_delete(fact_id=fact.pk, actor=request.user)
    messages.success(request, f"Forgot: {fact.fact}")
    return redirect("agents:customer_memory", customer_id=customer_id)
