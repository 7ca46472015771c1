"""The Self-RAG loop, driven by scripted drafts and grades served over the real OpenAI wire
protocol, searching real KnowledgeArticle rows and writing real Steps through the
RunSink; plus one run end to end with the simulated model."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
from asgiref.sync import async_to_sync

from agents.llm.base import LLMClient
from agents.llm.factory import llm_client_build
from agents.llm.simulated import MISTAKES, SimulatedLLM
from agents.models import KnowledgeArticle
from agents.retrieval.knowledge import kb_asearch, kb_sync_from_rows
from agents.retrieval.selfrag import SelfRagConfig, selfrag_execute
from agents.runtime import RunOutcome
from agents.services import agent_ensure_default
from agents.sink import RunSink
from tests.agents.runtime_helpers import phases, use_fake_llm
from traces.classifier import error_rules_load
from traces.models import Step, Trace
from traces.services import trace_create

QUESTION = "How many days do I have to return an item?"
RETURN_ANSWER = "You can return most items within 30 days of delivery."

KB = [
    {
        "slug": "return-window",
        "title": "How long do I have to return an item?",
        "category": "policy",
        "body": "You can return most items within 30 days of delivery for a full refund.",
    },
    {
        "slug": "gift-cards",
        "title": "Gift cards",
        "category": "faq",
        "body": "Gift cards are delivered by email, never expire and can be checked online.",
    },
    {
        "slug": "shipping-times",
        "title": "How long does shipping take?",
        "category": "faq",
        "body": "Standard shipping takes 3-5 business days after the order ships.",
    },
]


def draft(answer: str = RETURN_ANSWER, slugs: list[str] | None = None) -> tuple[str, str]:
    cited = ["return-window"] if slugs is None else slugs
    return ("ok", json.dumps({"answer": answer, "cited_slugs": cited}))


def grade(
    grounded: bool = True, helpful: bool = True, critique: str = "", improved: str | None = None
) -> tuple[str, str]:
    body = {
        "is_grounded": grounded,
        "is_helpful": helpful,
        "critique": critique,
        "improved_search_query": improved,
    }
    return ("ok", json.dumps(body))


@dataclass
class RagRun:
    trace: Trace
    outcome: RunOutcome
    # (phase, model requests the server had received when the step was written)
    written: list[tuple[str, int]] = field(default_factory=list)

    def steps(self, phase: str) -> list[Step]:
        return list(self.trace.steps.filter(phase=phase).order_by("step_number"))


@pytest.fixture
def kb(db: None) -> None:
    KnowledgeArticle.objects.bulk_create([KnowledgeArticle(**row) for row in KB])


@pytest.fixture
def fake_llm(kb: None, error_rules: None, settings: Any, openai_server: Any) -> Any:
    use_fake_llm(settings, openai_server)
    return openai_server


def run_selfrag(
    query: str = QUESTION,
    *,
    server: Any = None,
    llm: LLMClient | None = None,
    config: SelfRagConfig | None = None,
) -> RagRun:
    client = llm or llm_client_build()
    agent = agent_ensure_default()
    trace = trace_create(agent_id=agent.pk, query=query, llm_backend=client.backend)
    sink = RunSink(trace_id=str(trace.pk))
    written: list[tuple[str, int]] = []
    sink.on_step = lambda step: written.append((step.phase, len(server.requests) if server else 0))
    outcome = async_to_sync(selfrag_execute)(
        query=query,
        llm=client,
        sink=sink,
        rules=error_rules_load(),
        config=config or SelfRagConfig(),
        search=kb_asearch,
    )
    return RagRun(trace=trace, outcome=outcome, written=written)


def search_queries(run: RagRun) -> list[str]:
    return [step.details["search_query"] for step in run.steps("retrieval")]


def test_draft_that_passes_its_grade_is_delivered_after_three_steps(fake_llm: Any) -> None:
    # given a model whose first draft is grounded and helpful
    fake_llm.enqueue(draft(), grade())
    # when
    run = run_selfrag(server=fake_llm)
    # then
    assert phases(run.trace) == ["retrieval", "draft", "grade", "final"]
    assert run.outcome == RunOutcome("finished", RETURN_ANSWER, outcome="answered_from_data")
    retrieval, draft_step, grade_step, final = run.trace.steps.order_by("step_number")
    assert retrieval.details["search_query"] == QUESTION
    assert retrieval.details["slugs"][0] == "return-window"
    assert len(retrieval.details["scores"]) == len(retrieval.details["slugs"])
    assert retrieval.response_summary.splitlines()[0] == "How long do I have to return an item?"
    assert draft_step.response_summary == RETURN_ANSWER
    assert (draft_step.prompt_tokens, draft_step.completion_tokens) == (10, 5)
    assert draft_step.llm_backend == "openai"
    assert grade_step.ok and grade_step.details["is_grounded"] is True
    assert final.details == {"capped": False, "outcome": "answered_from_data"}
    assert {step.round_number for step in run.trace.steps.all()} == {1}


def test_prompts_carry_the_question_the_documents_and_the_draft(fake_llm: Any) -> None:
    fake_llm.enqueue(draft(), grade())

    run_selfrag(server=fake_llm)

    draft_prompt = fake_llm.requests[0].json["messages"][-1]["content"]
    grade_prompt = fake_llm.requests[1].json["messages"][-1]["content"]
    assert draft_prompt.startswith("# Self-RAG draft")
    assert f"## Question\n> {QUESTION}" in draft_prompt  # quoted: it is the customer's text
    assert "### [return-window] How long do I have to return an item?" in draft_prompt
    assert grade_prompt.startswith("# Self-RAG grade")
    assert f"## Draft answer\n> {RETURN_ANSWER}" in grade_prompt
    assert "strict fact checker" in grade_prompt and "FULLY covered" in grade_prompt
    schema_name = fake_llm.requests[1].json["response_format"]["json_schema"]["name"]
    assert schema_name == "RagGrade"


@pytest.mark.parametrize(
    ("improved", "critique", "second_query"),
    [
        ("gift card expiry", "Nothing about gift cards.", "gift card expiry"),
        (None, "Nothing about gift card expiry.", f"{QUESTION} nothing gift card expiry"),
        ("  ", "The gift cards are not mentioned.", f"{QUESTION} gift cards mentioned"),
    ],
)
def test_unhelpful_draft_makes_the_rewritten_query_the_next_search(
    fake_llm: Any, improved: str | None, critique: str, second_query: str
) -> None:
    fake_llm.enqueue(
        draft(),
        grade(helpful=False, critique=critique, improved=improved),
        draft("Gift cards never expire.", ["gift-cards"]),
        grade(),
    )

    run = run_selfrag(server=fake_llm)

    assert search_queries(run) == [QUESTION, second_query]
    assert "gift-cards" in run.steps("retrieval")[1].details["slugs"]
    assert run.outcome.final_answer == "Gift cards never expire."
    rounds = [step.round_number for step in run.trace.steps.order_by("step_number")]
    assert rounds == [1] * 3 + [2] * 4


def test_graders_that_always_fail_hit_the_hard_cap_then_fall_back(fake_llm: Any) -> None:
    # given a model whose drafts are never grounded
    for _ in range(3):
        fake_llm.enqueue(
            draft("You have 90 days."),
            grade(False, False, "90 days is not in the documents.", "return days"),
        )
    # when
    run = run_selfrag(server=fake_llm)
    # then: one retrieval plus two retries, and the ungrounded draft is never delivered
    assert phases(run.trace) == ["retrieval", "draft", "grade"] * 3 + ["fallback"]
    assert len(fake_llm.requests) == 6
    assert run.outcome.status == "fallback"
    assert run.outcome.final_answer == SelfRagConfig().fallback_reply
    assert run.outcome.error_type == "HALLUCINATED_ANSWER"
    fallback = run.steps("fallback")[0]
    assert (fallback.ok, fallback.round_number, fallback.details) == (False, 3, {"capped": True})
    assert [step.error_type for step in run.steps("grade")] == ["HALLUCINATED_ANSWER"] * 3


@pytest.mark.parametrize("max_retries", [0, 1, 4])
def test_retry_cap_follows_the_config(fake_llm: Any, max_retries: int) -> None:
    for _ in range(max_retries + 1):
        fake_llm.enqueue(draft("You have 90 days."), grade(False, False, "wrong", "return"))

    run = run_selfrag(server=fake_llm, config=SelfRagConfig(max_retries=max_retries))

    assert len(run.steps("retrieval")) == max_retries + 1
    assert run.outcome.status == "fallback"
    assert fake_llm.remaining == 0


def test_capped_but_grounded_draft_is_delivered_with_the_capped_flag(fake_llm: Any) -> None:
    for _ in range(3):
        fake_llm.enqueue(draft(), grade(True, False, "Does not say which items.", "items"))

    run = run_selfrag(server=fake_llm)

    assert phases(run.trace) == ["retrieval", "draft", "grade"] * 3 + ["final"]
    assert run.outcome == RunOutcome("finished", RETURN_ANSWER, outcome="answered_from_data")
    assert run.steps("final")[0].details == {
        "capped": True,
        "draft_attempt": 3,
        "outcome": "answered_from_data",
    }


def test_after_the_cap_the_latest_grounded_draft_wins_over_a_later_ungrounded_one(
    fake_llm: Any,
) -> None:
    fake_llm.enqueue(
        draft("Returns take 30 days."),
        grade(True, False, "vague", "return days"),
        draft(),
        grade(True, False, "still vague", "return window"),
        draft("You have 90 days."),
        grade(False, False, "90 is invented", "return"),
    )

    run = run_selfrag(server=fake_llm)

    assert run.outcome == RunOutcome("finished", RETURN_ANSWER, outcome="answered_from_data")
    assert run.steps("final")[0].details == {
        "capped": True,
        "draft_attempt": 2,
        "outcome": "answered_from_data",
    }


def test_grounded_abstention_citing_nothing_is_not_delivered(fake_llm: Any) -> None:
    for _ in range(3):
        fake_llm.enqueue(
            draft("I don't know.", []), grade(True, False, "no answer", "warranty length")
        )

    run = run_selfrag("How long is the warranty?", server=fake_llm)

    assert run.outcome.status == "fallback"
    assert run.outcome.error_type == ""


@pytest.mark.parametrize(
    ("script", "failed_phase"),
    [
        ([draft(), ("ok", "grounded: yes, helpful: yes")], "grade"),
        ([draft(), ("ok", '{"is_grounded": "maybe", "is_helpful": true}')], "grade"),
        ([("ok", "Here is my answer: 30 days")], "draft"),
        ([("ok", '{"cited_slugs": ["return-window"]}')], "draft"),
    ],
)
def test_unparseable_output_is_a_failed_attempt_that_consumes_a_retry(
    fake_llm: Any, script: list[tuple[str, str]], failed_phase: str
) -> None:
    fake_llm.enqueue(*script, draft(), grade())

    run = run_selfrag(server=fake_llm)

    bad = run.steps(failed_phase)[0]
    assert (bad.ok, bad.error_type, bad.round_number) == (False, "MODEL_FORMAT_ERROR", 1)
    assert bad.error_detail.startswith("Format error:")
    assert bad.prompt_tokens == 10
    assert len(run.steps("retrieval")) == 2
    assert run.steps("final")[0].round_number == 2
    assert run.outcome.status == "finished"


def test_fenced_json_is_accepted(fake_llm: Any) -> None:
    fenced = "```json\n" + draft()[1] + "\n```"
    fake_llm.enqueue(("ok", fenced), grade())

    run = run_selfrag(server=fake_llm)

    assert phases(run.trace) == ["retrieval", "draft", "grade", "final"]


def test_format_errors_to_the_cap_fall_back_with_their_error_type(fake_llm: Any) -> None:
    fake_llm.enqueue(*[("ok", "not json")] * 3)

    run = run_selfrag(server=fake_llm)

    assert phases(run.trace) == ["retrieval", "draft"] * 3 + ["fallback"]
    assert run.outcome.status == "fallback"
    assert run.outcome.error_type == "MODEL_FORMAT_ERROR"


@pytest.mark.parametrize(
    ("script", "expected_phases"),
    [
        ([("status", 401)], ["retrieval", "stopped"]),
        ([draft(), ("status", 400)], ["retrieval", "draft", "stopped"]),
        ([draft(), grade(helpful=False, improved="x"), ("status", 500)], None),
    ],
)
def test_llm_error_stops_the_run_as_failed(
    fake_llm: Any, script: list[tuple[Any, ...]], expected_phases: list[str] | None
) -> None:
    fake_llm.enqueue(*script)

    run = run_selfrag(server=fake_llm)

    assert run.outcome.status == "failed"
    assert run.outcome.error_type == "LLM_ERROR"
    assert run.outcome.final_answer == SelfRagConfig().fallback_reply
    stopped = run.trace.steps.order_by("step_number").last()
    assert stopped is not None
    assert (stopped.phase, stopped.ok, stopped.error_type) == ("stopped", False, "LLM_ERROR")
    assert phases(run.trace) == (
        expected_phases or ["retrieval", "draft", "grade", "retrieval", "stopped"]
    )


def test_every_step_is_written_in_order_before_the_next_model_call(fake_llm: Any) -> None:
    fake_llm.enqueue(
        draft(),
        ("ok", "garbage"),
        draft(),
        grade(helpful=False, improved="gift card"),
        draft("Gift cards never expire.", ["gift-cards"]),
        grade(),
    )

    run = run_selfrag(server=fake_llm)

    steps = list(run.trace.steps.order_by("step_number"))
    assert [step.step_number for step in steps] == list(range(1, len(steps) + 1))
    assert [step.round_number for step in steps] == [1, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    # each model step was stored before the next request reached the model server
    assert run.written == [
        ("retrieval", 0), ("draft", 1), ("grade", 2),
        ("retrieval", 2), ("draft", 3), ("grade", 4),
        ("retrieval", 4), ("draft", 5), ("grade", 6), ("final", 6),
    ]  # fmt: skip
    started = [step.created_at for step in steps]
    assert started == sorted(started)


# --- the simulated model, end to end -----------------------------------------------------


@pytest.fixture
def sandbox_kb(db: None, error_rules: None) -> None:
    from sandbox.articles import ARTICLES

    kb_sync_from_rows(dict(article) for article in ARTICLES)


@pytest.mark.parametrize(
    ("question", "fact"),
    [
        (QUESTION, "30 days"),
        ("How much does expedited shipping cost?", "$14.99"),
    ],
)
def test_simulated_model_answers_grounded_from_the_knowledge_base(
    sandbox_kb: None, question: str, fact: str
) -> None:
    llm = SimulatedLLM(seed=3, error_rates=dict.fromkeys(MISTAKES, 0.0), hint_follow_rate=0.0)

    run = run_selfrag(question, llm=llm)

    assert run.outcome.status == "finished"
    assert fact in run.outcome.final_answer
    assert phases(run.trace) == ["retrieval", "draft", "grade", "final"]
    grade_step = run.steps("grade")[0]
    assert grade_step.details["is_grounded"] is True
    assert grade_step.details["is_helpful"] is True
    assert grade_step.llm_backend == "simulated"
    cited = set(run.steps("draft")[0].details["cited_slugs"])
    assert cited <= set(run.steps("retrieval")[0].details["slugs"])


def test_simulated_model_falls_back_on_a_question_the_knowledge_base_does_not_cover(
    sandbox_kb: None,
) -> None:
    llm = SimulatedLLM(seed=3, error_rates=dict.fromkeys(MISTAKES, 0.0), hint_follow_rate=0.0)

    run = run_selfrag("Do you sell telescopes to astronomers?", llm=llm)

    assert run.outcome.status == "fallback"
    assert len(run.steps("retrieval")) == 3
    assert len(set(search_queries(run))) > 1


def test_a_delivered_draft_carries_no_internal_codes(fake_llm: Any) -> None:
    fake_llm.enqueue(draft(RETURN_ANSWER + " (RESOURCE_NOT_FOUND)"), grade())
    run = run_selfrag(server=fake_llm)
    assert run.outcome.final_answer == RETURN_ANSWER
    assert run.steps("final")[0].details["removed_from_answer"] == ["RESOURCE_NOT_FOUND"]


def test_a_draft_made_only_of_exception_text_is_not_delivered(fake_llm: Any) -> None:
    fake_llm.enqueue(draft("ConnectionError: [Errno 111] Connection refused"), grade())
    run = run_selfrag(server=fake_llm)
    assert (run.outcome.status, run.outcome.outcome) == ("fallback", "handed_over")
    assert run.outcome.final_answer == SelfRagConfig().fallback_reply


# --- redelivery ------------------------------------------------------------------------
def _delivered(trace: Trace) -> RunOutcome | None:
    from agents.services import run_execute

    outcome = async_to_sync(run_execute)(trace_id=str(trace.pk), reflect=False)
    trace.refresh_from_db()
    return outcome


def _stored(trace: Trace) -> list[tuple[int, str, int, str]]:
    return list(
        trace.steps.order_by("step_number").values_list(
            "step_number", "phase", "round_number", "response_summary"
        )
    )


@pytest.mark.parametrize("kept", [1, 2, 3, 5])
def test_a_redelivered_selfrag_run_goes_on_from_its_recorded_steps(
    fake_llm: Any, kept: int
) -> None:
    # given a Self-RAG run (attempt 1 unhelpful, attempt 2 passes) delivered once
    script = [
        draft(),
        grade(helpful=False, critique="Say which items.", improved="gift cards"),
        draft("Gift cards never expire.", ["gift-cards"]),
        grade(),
    ]
    fake_llm.enqueue(*script)
    trace = trace_create(agent_id=agent_ensure_default().pk, query=QUESTION, llm_backend="openai")
    assert _delivered(trace) is not None
    whole = _stored(trace)
    assert [phase for _, phase, _, _ in whole] == [
        *("retrieval", "draft", "grade"),
        *("retrieval", "draft", "grade", "final"),
    ]
    # ... whose worker died after writing its first ``kept`` steps
    trace.steps.filter(step_number__gt=kept).delete()
    Trace.objects.filter(pk=trace.pk).update(status="running", final_answer="", outcome="")
    # the model calls the lost steps had made (drafts and grades after the kept ones)
    lost = [p for _, p, _, _ in whole[kept:] if p in ("draft", "grade")]
    fake_llm.requests.clear()
    fake_llm.enqueue(*script[len(script) - len(lost) :])
    # when it is delivered again
    outcome = _delivered(trace)
    # then it went on from there: the same steps once each, the model asked only for the rest
    assert _stored(trace) == whole
    assert len(fake_llm.requests) == len(lost)
    assert outcome is not None and outcome.final_answer == "Gift cards never expire."
    assert trace.status == Trace.Status.FINISHED


def test_a_selfrag_run_redelivered_after_its_last_step_keeps_its_outcome(
    fake_llm: Any,
) -> None:
    fake_llm.enqueue(draft(), grade())
    trace = trace_create(agent_id=agent_ensure_default().pk, query=QUESTION, llm_backend="openai")
    _delivered(trace)
    whole = _stored(trace)
    Trace.objects.filter(pk=trace.pk).update(status="running", final_answer="", outcome="")
    fake_llm.requests.clear()

    outcome = _delivered(trace)

    assert _stored(trace) == whole and not fake_llm.requests
    assert outcome == RunOutcome("finished", RETURN_ANSWER, outcome="answered_from_data")
    assert (trace.status, trace.final_answer) == (Trace.Status.FINISHED, RETURN_ANSWER)
