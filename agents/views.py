"""Staff pages of the runtime: the chat assistant, its embeddable widget and its actions."""

from __future__ import annotations

import re
import uuid

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.clickjacking import xframe_options_exempt
from django.views.decorators.http import require_http_methods, require_POST

from agents.forms import ChatForm
from agents.services import agent_ensure_default, run_start
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
    else:
        response = _chat(request, template="agents/chat_embed.html", here=reverse("agents:embed"))
    return _allow_framing(response)


@login_required
def conversation_open(request: HttpRequest, session_id: str) -> HttpResponse:
    """Continue one of the user's own earlier conversations."""
    if not conversation_exists(user=request.user, session_id=session_id):
        raise Http404("No such conversation.")
    request.session[SESSION_KEY] = session_id
    return redirect("agents:embed" if request.GET.get("embed") else "agents:chat")


@login_required
@require_POST
def conversation_new(request: HttpRequest) -> HttpResponse:
    request.session[SESSION_KEY] = uuid.uuid4().hex
    return redirect("agents:embed" if request.POST.get("embed") else "agents:chat")


@login_required
@require_POST
def run_handover(request: HttpRequest, trace_id: str) -> HttpResponse:
    """Hand the conversation of this run over to a person (counted as a takeover)."""
    run = get_object_or_404(runs_for_chat(user=request.user), pk=trace_id)
    trace_handover(trace_id=str(run.pk), user_id=request.user.pk)
    return run_answer_response(request, trace_id=str(run.pk))
