"""Staff pages of the runtime: the embedded chat assistant."""

from __future__ import annotations

import uuid

from django.contrib.auth.decorators import login_required, permission_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from agents.forms import ChatForm
from agents.services import START_RUN, agent_ensure_default, run_start
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
