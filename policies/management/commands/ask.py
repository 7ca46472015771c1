"""Ask the agent one question from the shell and print each step as it happens.

The command runs the agent and then reports what Reflexion concluded, so it spans the
runtime and the learning loop: it lives in the higher of the two apps (DESIGN.md layers)."""

from __future__ import annotations

import time
from typing import Any

from asgiref.sync import async_to_sync
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from agents.models import Agent
from agents.query_validation import (
    validate_customer_id,
    validate_query_length,
    validate_query_text,
)
from agents.services import DEFAULT_AGENT_SLUG, run_enqueue, run_execute
from traces.models import Step, Trace
from traces.services import trace_create


def format_step(step: Step) -> str:
    head = f"[{step.step_number:>2}] {step.phase:<10}"
    if step.phase == Step.Phase.REASONING:
        if not step.ok:
            return f"{head} ✗ {step.error_type}: {step.error_detail}"
        target = step.tool_name or "final_answer"
        return f"{head} thought: {step.thought}\n{'':16}action: {target} {step.action_input}"
    if step.phase == Step.Phase.ACTION:
        mark = "✓" if step.ok else "✗"
        status = step.status_code if step.status_code is not None else "-"
        line = f"{head} {mark} {step.tool_name or step.action_type} -> {status}"
        if step.error_type:
            line += f" {step.error_type}"
        line += f" ({step.latency_ms} ms)"
        if step.adapters_fired:
            line += f"  adapters: {', '.join(a['adapter'] for a in step.adapters_fired)}"
        body = step.response_summary or step.error_detail
        return f"{line}\n{'':16}{body[:300]}"
    if step.phase == Step.Phase.REFLECTION:
        return f"{head} {step.response_summary}"
    if step.phase == "retrieval":
        titles = " | ".join(step.response_summary.splitlines()) or "(nothing found)"
        return f"{head} {step.details.get('search_query', '')!r} -> {titles}"
    if step.error_type == "LLM_ERROR":
        # Why the model call failed, not the apology the customer got.
        return f"{head} LLM_ERROR: {step.error_detail}"
    return f"{head} {step.error_type or ''} {step.response_summary}".rstrip()


class Command(BaseCommand):
    help = "Run the agent on one question and print every step (Thought, Action, ...) live."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("query", help='e.g. "Where is my order #W1234567?"')
        parser.add_argument("--agent", default=DEFAULT_AGENT_SLUG)
        parser.add_argument("--customer-id", default="")
        parser.add_argument(
            "--worker",
            action="store_true",
            help="Send the run to the Celery workers and follow its steps (default when "
            "AGENT_EXECUTOR=celery); otherwise it runs in this process.",
        )
        parser.add_argument("--timeout", type=float, default=180.0)

    def handle(self, *args: Any, **options: Any) -> None:
        query = options["query"].strip()
        if not query:
            raise CommandError("The question is empty.")
        try:
            validate_query_text(query)
            validate_query_length(query)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        try:
            validate_customer_id(options["customer_id"])
        except ValidationError as exc:
            raise CommandError(f"--customer-id: {' '.join(exc.messages)}") from exc
        try:
            agent = Agent.objects.get(slug=options["agent"], is_active=True)
        except Agent.DoesNotExist as exc:
            raise CommandError(
                f"No active agent {options['agent']!r}. Run `manage.py demo_seed` first."
            ) from exc
        if not agent.tools.exists():
            raise CommandError(f"Agent {agent.slug!r} may use no tools: run `manage.py demo_seed`.")
        backend = settings.LLM_BACKEND
        trace = trace_create(
            agent_id=agent.pk,
            query=query,
            llm_backend=backend,
            llm_model="simulated-react-1" if backend == "simulated" else settings.LLM_MODEL,
            customer_id=options["customer_id"],
            source="cli",
        )
        label = " (SIMULATED model — demo/test instrument)" if backend == "simulated" else ""
        self.stdout.write(f"trace {trace.pk}  backend={backend}{label}")
        self.stdout.write(f"sandbox: {settings.SANDBOX_BASE_URL}")
        if options["worker"] or settings.AGENT_EXECUTOR == "celery":
            run_enqueue(trace_id=str(trace.pk))
            self._follow(trace, options["timeout"])
        else:
            async_to_sync(run_execute)(
                trace_id=str(trace.pk), on_step=lambda step: self.stdout.write(format_step(step))
            )
        trace.refresh_from_db()
        self._summary(trace)
        self._reflexion(trace)

    def _follow(self, trace: Trace, timeout: float) -> None:
        seen = 0
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for step in trace.steps.filter(step_number__gt=seen).order_by("step_number"):
                self.stdout.write(format_step(step))
                seen = step.step_number
            trace.refresh_from_db(fields=["status"])
            if trace.is_terminal and not trace.steps.filter(step_number__gt=seen).exists():
                return
            time.sleep(0.2)  # polling the trace store; a worker elsewhere writes the steps
        raise CommandError(f"No terminal state after {timeout:g}s; is a worker running?")

    def _reflexion(self, trace: Trace) -> None:
        """In-process runs hand failures to Reflexion on a background thread: wait for it
        and say what it concluded."""
        if settings.AGENT_EXECUTOR == "celery":
            return
        from policies.models import ReflexionProposal
        from policies.tasks import reflexion_inprocess_drain

        wait = settings.ASK_REFLEXION_WAIT_SECONDS
        try:
            reflexion_inprocess_drain(timeout=wait)
        except TimeoutError:
            self.stdout.write(
                self.style.WARNING(
                    f"reflexion: still running after {wait:g} s (ASK_REFLEXION_WAIT_SECONDS); "
                    "its proposals will appear on the trace page."
                )
            )
        for proposal in ReflexionProposal.objects.filter(trace=trace).order_by("created_at"):
            label = f"reflexion: {proposal.error_type} -> {proposal.outcome}"
            if proposal.strategy_id:
                label += f" S{proposal.strategy_id} ({proposal.payload.get('strategy_update', '')})"
            if proposal.reason:
                label += f": {proposal.reason}"
            self.stdout.write(label)

    def _summary(self, trace: Trace) -> None:
        self.stdout.write("")
        self.stdout.write(
            f"status: {trace.status}"
            + (f" ({trace.error_type})" if trace.error_type else "")
            + (f"  outcome: {trace.get_outcome_display()}" if trace.outcome else "")
        )
        self.stdout.write(
            f"steps: {trace.total_steps}  latency: {trace.total_latency_ms} ms  "
            f"tokens: {trace.total_tokens}"
        )
        if trace.final_answer:
            self.stdout.write(self.style.SUCCESS(f"answer: {trace.final_answer}"))
        if trace.error_type == "LLM_ERROR":
            self.stdout.write(
                self.style.WARNING(
                    f"The model at {settings.LLM_BASE_URL or 'the OpenAI API'} "
                    f"({settings.LLM_MODEL}) gave no usable answer; see the LLM_ERROR line above "
                    "and docs/models.md."
                )
            )
        if trace.steps.filter(error_type="CONNECTION_ERROR").exists():
            self.stdout.write(
                self.style.WARNING(
                    f"The sandbox at {settings.SANDBOX_BASE_URL} did not answer: is `make run` "
                    "serving the app?"
                )
            )
