"""Staff pages of the runtime: the embedded chat assistant and the admins' tools page."""

from __future__ import annotations

import uuid

from django.contrib import messages
from django.contrib.auth.decorators import login_required, permission_required
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_http_methods

from agents.forms import ChatForm, ToolEditForm
from agents.models import Tool
from agents.selectors import (
    ERROR_WINDOWS,
    MANAGE_TOOLS,
    tool_alerts_recent,
    tool_error_rates,
    tools_for_admin,
)
from agents.services import (
    START_RUN,
    agent_ensure_default,
    run_start,
    tool_set_enabled,
    tool_unsuspend,
    tool_update,
)
from traces.selectors import traces_visible_to


def _session_key(request: HttpRequest) -> str:
    if "chat_session" not in request.session:
        request.session["chat_session"] = uuid.uuid4().hex
    return request.session["chat_session"]


@login_required
@permission_required(START_RUN, raise_exception=True)
@require_http_methods(["GET", "POST"])
def chat(request: HttpRequest) -> HttpResponse:
    """Ask the assistant; each question becomes a run whose steps stream in below."""
    session_id = _session_key(request)
    form = ChatForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        run_start(
            agent=agent_ensure_default(),
            query=form.cleaned_data["query"],
            customer_id=form.cleaned_data["customer_id"],
            session_id=session_id,
            user_id=request.user.pk,
            source="chat",
        )
        return redirect("agents:chat")
    runs = list(
        traces_visible_to(user=request.user)
        .filter(session_id=session_id)
        .prefetch_related("steps")
        .order_by("-created_at")[:10]
    )
    runs.reverse()
    return render(request, "agents/chat.html", {"form": form, "runs": runs})


def _error_window(request: HttpRequest) -> str:
    window = request.GET.get("window", "")
    return window if window in ERROR_WINDOWS else next(iter(ERROR_WINDOWS))


@login_required
@permission_required(MANAGE_TOOLS, raise_exception=True)
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
@permission_required(MANAGE_TOOLS, raise_exception=True)
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
@permission_required(MANAGE_TOOLS, raise_exception=True)
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
