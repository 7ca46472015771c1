"""The simulated ReAct model: deterministic, reads only its prompt, makes seeded mistakes."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from agents.llm.base import LLMError, LLMResponse
from agents.llm.schemas import FINAL_ANSWER, RagDraft, RagGrade, ReasoningStep, Reflection
from agents.llm.simulated import MISTAKES, SimulatedLLM
from agents.prompts import (
    RoundRecord,
    ToolSpec,
    rag_draft_messages,
    rag_grade_messages,
    reasoning_messages,
    reflection_messages,
)
from agents.tools.builtin_tools import compare_prices  # noqa: F401  (registers the tool)
from agents.tools.registry import registered_python_tool
from agents.tools.tool_catalog import SANDBOX_TOOLS

SANDBOX_SPECS = [
    ToolSpec(name=d.name, description=d.description, params_schema=d.params_schema)
    for d in SANDBOX_TOOLS
]
_COMPARE = registered_python_tool("compare_prices")
assert _COMPARE is not None
ALL_SPECS = [
    *SANDBOX_SPECS,
    ToolSpec(_COMPARE.name, _COMPARE.description, _COMPARE.params_schema),
]
NO_MISTAKES = dict.fromkeys(MISTAKES, 0.0)

ORDER_OBSERVATION = {
    "order_id": "#W1234567",
    "status": "shipped",
    "shipping": {
        "carrier": "UPS",
        "tracking_number": "1Z999AA10123456784",
        "estimated_delivery": "2025-06-03",
    },
}


def ok_round(number: int, action: str, action_input: dict[str, Any], body: Any) -> RoundRecord:
    text = body if isinstance(body, str) else json.dumps(body, separators=(",", ":"))
    return RoundRecord(
        number=number,
        thought="",
        action=action,
        action_input=action_input,
        observation=text,
        ok=True,
        status_code=200,
    )


def error_round(
    number: int,
    action: str,
    action_input: dict[str, Any],
    *,
    status_code: int | None,
    error_type: str,
    body: dict[str, Any] | None = None,
) -> RoundRecord:
    return RoundRecord(
        number=number,
        action=action,
        action_input=action_input,
        observation=json.dumps(body or {"error": error_type}),
        ok=False,
        status_code=status_code,
        error_type=error_type,
    )


def complete(
    query: str,
    *,
    rounds: list[RoundRecord] | None = None,
    earlier: list[RoundRecord] | None = None,
    key_facts: list[str] | None = None,
    hints: list[str] | None = None,
    warnings: list[str] | None = None,
    rates: dict[str, float] | None = None,
    hint_follow_rate: float = 0.0,
    seed: int = 7,
    tools: list[ToolSpec] | None = None,
    customer_id: str = "",
) -> LLMResponse:
    llm = SimulatedLLM(
        seed=seed,
        error_rates=NO_MISTAKES if rates is None else rates,
        hint_follow_rate=hint_follow_rate,
    )
    messages = reasoning_messages(
        query=query,
        customer_id=customer_id,
        tools=ALL_SPECS if tools is None else tools,
        hints=hints or [],
        key_facts=key_facts or [],
        earlier_rounds=earlier or [],
        recent_rounds=rounds or [],
        warnings=warnings or [],
    )
    return asyncio.run(llm.complete(messages=messages, schema=ReasoningStep, purpose="reasoning"))


def step(query: str, **kwargs: Any) -> ReasoningStep:
    return ReasoningStep.model_validate_json(complete(query, **kwargs).text)


def reflection(rnd: RoundRecord) -> Reflection:
    llm = SimulatedLLM(seed=7, error_rates=NO_MISTAKES, hint_follow_rate=0.0)
    messages = reflection_messages(query="Where is my order #W1234567?", rnd=rnd)
    response = asyncio.run(llm.complete(messages=messages, schema=Reflection, purpose="reflection"))
    return Reflection.model_validate_json(response.text)


# --- determinism and labels ---------------------------------------------------------


def test_same_prompt_and_seed_give_identical_text():
    rates = dict.fromkeys(MISTAKES, 0.5)

    texts = {complete("How much are the Aurora Headphones?", rates=rates).text for _ in range(5)}

    assert len(texts) == 1


def test_different_seeds_can_give_different_text():
    rates = dict.fromkeys(MISTAKES, 0.5)

    texts = {
        complete("How much are the Aurora Headphones?", rates=rates, seed=seed).text
        for seed in range(20)
    }

    assert len(texts) > 1


def test_response_is_labelled_and_costs_nothing():
    response = complete("Where is my order #W1234567?")

    assert (response.backend, response.model) == ("simulated", "simulated-react-1")
    assert response.usage.cost_usd == 0.0
    assert response.usage.prompt_tokens > 500
    assert response.usage.completion_tokens == pytest.approx(len(response.text) / 4, abs=1)


def test_unknown_schema_raises_a_permanent_error():
    class Proposal(BaseModel):
        text: str

    llm = SimulatedLLM(seed=7, error_rates={}, hint_follow_rate=0.0)
    messages = reflection_messages(query="hi", rnd=RoundRecord(number=1))

    with pytest.raises(LLMError, match="cannot answer schema Proposal") as caught:
        asyncio.run(llm.complete(messages=messages, schema=Proposal, purpose="reflexion"))

    assert caught.value.transient is False


def test_latency_is_awaited_so_many_calls_overlap():
    llm = SimulatedLLM(seed=7, error_rates={}, hint_follow_rate=0.0, latency_ms=200)
    messages = reflection_messages(query="hi", rnd=RoundRecord(number=1, ok=True))

    async def many() -> tuple[int, list[LLMResponse]]:
        calls = [
            asyncio.create_task(
                llm.complete(messages=messages, schema=Reflection, purpose="reflection")
            )
            for _ in range(50)
        ]
        # One turn of the loop runs every call up to its first await. A latency that
        # blocked (time.sleep) would finish each call inside that turn, one after another.
        await asyncio.sleep(0)
        waiting = sum(not call.done() for call in calls)
        return waiting, await asyncio.gather(*calls)

    waiting, responses = asyncio.run(many())

    assert waiting == 50
    assert min(response.latency_ms for response in responses) >= 200


# --- first action per intent --------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "action", "action_input"),
    [
        ("Where is my order #W1234567?", "get_order", {"order_id": "#W1234567"}),
        ("Has order W7654321 shipped yet?", "get_order", {"order_id": "#W7654321"}),
        (
            "I am U00001234, when will my last order arrive?",
            "list_user_orders",
            {"user_id": "U00001234", "limit": 3},
        ),
        ("I want to return order #W1234567", "get_return_status", {"order_id": "#W1234567"}),
        ("Can I get a refund for W1234567?", "get_return_status", {"order_id": "#W1234567"}),
        (
            "How much are the Aurora Wireless Headphones?",
            "search_products",
            {"query": "Aurora Wireless Headphones"},
        ),
        ("What is the price of AWH-2041-BLK?", "get_sku_price", {"sku": "AWH-2041-BLK"}),
        ("how much does the trail runner cost?", "search_products", {"query": "trail runner"}),
        (
            "Is the Nimbus Smart Speaker in stock?",
            "search_products",
            {"query": "Nimbus Smart Speaker"},
        ),
        ("is the blue yoga mat available?", "search_products", {"query": "blue yoga mat"}),
        ("Is AWH-2041-BLK back in stock?", "check_inventory", {"sku": "AWH-2041-BLK"}),
        ("What is your return policy?", "search_articles", {"query": "return policy"}),
        (
            "How long does standard shipping take?",
            "search_articles",
            {"query": "standard shipping"},
        ),
    ],
)
def test_first_action_follows_the_request_intent(query, action, action_input):
    result = step(query)

    assert (result.action, result.action_input) == (action, action_input)


def test_order_question_without_any_id_asks_for_the_order_number():
    result = step("Where is my order?")

    assert result.action == FINAL_ANSWER
    assert "order number" in (result.final_answer or "")


def test_customer_user_id_stands_in_when_the_request_has_no_id():
    result = step("Where is my order?", customer_id="U00001234")

    assert (result.action, result.action_input) == (
        "list_user_orders",
        {"user_id": "U00001234", "limit": 3},
    )


def test_only_listed_tools_are_used():
    tools = [spec for spec in ALL_SPECS if spec.name == "get_order"]

    result = step("How much are the Aurora Headphones?", tools=tools)

    assert result.action == FINAL_ANSWER
    assert "not available" in (result.final_answer or "")


# --- multi-round flows --------------------------------------------------------------


def test_order_flow_answers_with_the_facts_of_the_observation():
    rounds = [ok_round(1, "get_order", {"order_id": "#W1234567"}, ORDER_OBSERVATION)]

    result = step("Where is my order #W1234567?", rounds=rounds)

    assert result.action == FINAL_ANSWER
    for fact in ("#W1234567", "shipped", "UPS", "1Z999AA10123456784", "2025-06-03"):
        assert fact in (result.final_answer or "")


def test_order_flow_from_a_user_id_gets_the_newest_order_then_answers():
    orders = {"orders": [{"order_id": "#W7654321"}, {"order_id": "#W1111111"}]}
    listed = ok_round(1, "list_user_orders", {"user_id": "U00001234", "limit": 3}, orders)
    fetched = ok_round(2, "get_order", {"order_id": "#W7654321"}, {"status": "delivered"})

    second = step("I am U00001234, where is my order?", rounds=[listed])
    third = step("I am U00001234, where is my order?", rounds=[listed, fetched])

    assert (second.action, second.action_input) == ("get_order", {"order_id": "#W7654321"})
    assert third.action == FINAL_ANSWER
    assert "#W7654321" in (third.final_answer or "")
    assert "delivered" in (third.final_answer or "")


def test_truncated_observation_still_yields_the_fields_it_shows():
    cut = '{"order_id":"#W1234567","status":"in_transit","shipping":{"carrier":"DHL","track…'
    rounds = [ok_round(1, "get_order", {"order_id": "#W1234567"}, cut)]

    answer = step("Where is my order #W1234567?", rounds=rounds).final_answer or ""

    assert "in_transit" in answer
    assert "DHL" in answer
    assert "track…" not in answer


def test_summarised_round_is_read_from_its_key_fact():
    earlier = [ok_round(1, "get_order", {"order_id": "#W1234567"}, ORDER_OBSERVATION)]
    full = json.dumps(ORDER_OBSERVATION, separators=(",", ":"))
    key_facts = [f'get_order {{"order_id": "#W1234567"}} -> {full}']

    answer = step("Where is my order #W1234567?", earlier=earlier, key_facts=key_facts)

    assert "1Z999AA10123456784" in (answer.final_answer or "")


def test_price_flow_searches_then_prices_then_answers():
    query = "How much are the Aurora Headphones?"
    products = [{"product_id": 12, "name": "Aurora Headphones", "skus": ["AWH-2041-BLK"]}]
    searched = ok_round(1, "search_products", {"query": "Aurora Headphones"}, products)
    price = {"sku": "AWH-2041-BLK", "price": "129.99", "final_price": "103.99"}
    priced = ok_round(2, "get_sku_price", {"sku": "AWH-2041-BLK"}, price)

    second = step(query, rounds=[searched])
    third = step(query, rounds=[searched, priced])

    assert (second.action, second.action_input) == ("get_sku_price", {"sku": "AWH-2041-BLK"})
    assert third.action == FINAL_ANSWER
    assert "129.99" in (third.final_answer or "")
    assert "103.99" in (third.final_answer or "")


def test_two_products_are_priced_compared_and_the_cheaper_named():
    query = "Which is cheaper, the Aurora Headphones or the Nimbus Speaker?"
    rounds = [
        ok_round(1, "search_products", {"query": "Aurora Headphones"}, [{"sku": "AWH-2041-BLK"}]),
        ok_round(2, "get_sku_price", {"sku": "AWH-2041-BLK"}, {"final_price": 99.5}),
        ok_round(3, "search_products", {"query": "Nimbus Speaker"}, [{"sku": "NSP-1100-WHT"}]),
        ok_round(4, "get_sku_price", {"sku": "NSP-1100-WHT"}, {"final_price": 79.0}),
    ]
    compared = ok_round(
        5,
        "compare_prices",
        {"price_a": 99.5, "price_b": 79.0},
        {"cheaper": "b", "difference": "20.5"},
    )

    fifth = step(query, rounds=rounds)
    sixth = step(query, rounds=[*rounds, compared])

    assert (fifth.action, fifth.action_input) == (
        "compare_prices",
        {"price_a": 99.5, "price_b": 79.0},
    )
    assert "Nimbus Speaker is cheaper than Aurora Headphones by 20.5" in (sixth.final_answer or "")


def test_stock_flow_answers_with_quantity_and_restock_date():
    query = "Is the Nimbus Speaker in stock?"
    rounds = [
        ok_round(1, "search_products", {"query": "Nimbus Speaker"}, [{"sku": "NSP-1100-WHT"}]),
        ok_round(
            2,
            "check_inventory",
            {"sku": "NSP-1100-WHT"},
            {"sku": "NSP-1100-WHT", "in_stock": False, "restock_date": "2025-07-01"},
        ),
    ]

    answer = step(query, rounds=rounds).final_answer or ""

    assert "out of stock" in answer
    assert "2025-07-01" in answer


def test_stock_per_warehouse_is_reported_as_observed():
    body = {
        "sku": "NSP-1100-WHT",
        "warehouses": [
            {"warehouse": "Berlin", "available": 2},
            {"warehouse": "Lyon", "available": 0},
        ],
    }
    rounds = [ok_round(1, "check_inventory", {"sku": "NSP-1100-WHT"}, body)]

    answer = step("Is NSP-1100-WHT in stock?", rounds=rounds).final_answer or ""

    assert answer == "NSP-1100-WHT is in stock (available per warehouse: Berlin: 2; Lyon: 0)."


def test_return_flow_answers_with_eligibility_and_deadline():
    body = {"order_id": "#W1234567", "eligible": True, "return_deadline": "2025-06-30"}
    rounds = [ok_round(1, "get_return_status", {"order_id": "#W1234567"}, body)]

    answer = step("I want to return order #W1234567", rounds=rounds).final_answer or ""

    assert "is eligible for a return" in answer
    assert "2025-06-30" in answer


def test_return_flow_lists_existing_requests_without_borrowing_their_reason():
    body = {
        "eligible": False,
        "reason": None,
        "returns": [{"return_id": "R-77", "status": "approved", "reason": "damaged"}],
    }
    rounds = [ok_round(1, "get_return_status", {"order_id": "#W1234567"}, body)]

    answer = step("I want to return order #W1234567", rounds=rounds).final_answer or ""

    assert "is not eligible for a return" in answer
    assert "R-77: approved" in answer
    assert "damaged" not in answer


def test_policy_flow_quotes_the_top_article():
    articles = {
        "results": [
            {"title": "Returns and refunds", "summary": "Items can be returned within 30 days."},
            {"title": "Shipping", "summary": "Standard shipping takes 3-5 days."},
        ]
    }
    rounds = [ok_round(1, "search_articles", {"query": "return policy"}, articles)]

    answer = step("What is your return policy?", rounds=rounds).final_answer or ""

    assert '"Returns and refunds"' in answer
    assert "within 30 days" in answer
    assert "3-5 days" not in answer


def test_empty_search_is_retried_without_its_first_word():
    rounds = [ok_round(1, "search_products", {"query": "blue yoga mat"}, {"results": []})]

    result = step("is the blue yoga mat available?", rounds=rounds)

    assert (result.action, result.action_input) == ("search_products", {"query": "yoga mat"})


def test_search_result_whose_colour_the_request_names_is_chosen():
    results = {
        "results": [
            {
                "name": "Yoga Mat",
                "skus": [
                    {"sku": "YGM-1000-GRN", "color": "green"},
                    {"sku": "YGM-1000-BLU", "color": "blue"},
                ],
            }
        ]
    }
    rounds = [
        ok_round(1, "search_products", {"query": "blue yoga mat"}, {"results": []}),
        ok_round(2, "search_products", {"query": "yoga mat"}, results),
    ]

    result = step("is the blue yoga mat available?", rounds=rounds)

    assert (result.action, result.action_input) == ("check_inventory", {"sku": "YGM-1000-BLU"})


def test_search_without_results_says_the_product_was_not_found():
    rounds = [
        ok_round(1, "search_products", {"query": "Zen Kettle"}, {"results": []}),
        ok_round(2, "search_products", {"query": "Kettle"}, {"results": []}),
    ]

    answer = step("Is the Zen Kettle in stock?", rounds=rounds).final_answer or ""

    assert 'could not find a product matching "Zen Kettle"' in answer


# --- error handling -----------------------------------------------------------------


def test_product_name_sent_as_sku_switches_to_a_search_after_404():
    rounds = [
        error_round(
            1,
            "get_sku_price",
            {"sku": "Aurora Headphones"},
            status_code=404,
            error_type="RESOURCE_NOT_FOUND",
        )
    ]

    result = step("How much are the Aurora Headphones?", rounds=rounds)

    assert (result.action, result.action_input) == (
        "search_products",
        {"query": "Aurora Headphones"},
    )


@pytest.mark.parametrize(
    ("status_code", "error_type"),
    [(500, "INTERNAL_SERVER_ERROR"), (429, "RATE_LIMITED"), (504, "TIMEOUT"), (None, "TIMEOUT")],
)
def test_transient_error_is_retried_once_then_reported(status_code, error_type):
    args = {"order_id": "#W1234567"}
    first = error_round(1, "get_order", args, status_code=status_code, error_type=error_type)
    second = error_round(2, "get_order", args, status_code=status_code, error_type=error_type)

    retry = step("Where is my order #W1234567?", rounds=[first])
    give_up = step("Where is my order #W1234567?", rounds=[first, second])

    assert (retry.action, retry.action_input) == ("get_order", args)
    assert give_up.action == FINAL_ANSWER
    assert "right now" in (give_up.final_answer or "")


def test_repeat_warning_stops_a_retry():
    args = {"order_id": "#W1234567"}
    rounds = [
        error_round(1, "get_order", args, status_code=500, error_type="INTERNAL_SERVER_ERROR")
    ]
    warning = "You called get_order 2 times in a row with the same arguments. Do not repeat it."

    result = step("Where is my order #W1234567?", rounds=rounds, warnings=[warning])

    assert result.action == FINAL_ANSWER


def test_missing_order_is_reported_as_not_found():
    args = {"order_id": "#W1234567"}
    rounds = [error_round(1, "get_order", args, status_code=404, error_type="RESOURCE_NOT_FOUND")]

    answer = step("Where is my order #W1234567?", rounds=rounds).final_answer or ""

    assert "not found" in answer
    assert "#W1234567" in answer


def test_type_mismatch_is_corrected_as_the_error_asks():
    body = {"error": "TYPE_MISMATCH", "field": "order_id", "expected_type": "integer"}
    rounds = [
        error_round(
            1,
            "get_order",
            {"order_id": "#W1234567"},
            status_code=400,
            error_type="TYPE_MISMATCH",
            body=body,
        )
    ]

    result = step("Where is my order #W1234567?", rounds=rounds)

    assert (result.action, result.action_input) == ("get_order", {"order_id": 1234567})


def test_limit_sent_as_a_string_is_resent_as_an_integer():
    rounds = [
        error_round(
            1,
            "list_user_orders",
            {"user_id": "U00001234", "limit": "3"},
            status_code=None,
            error_type="TYPE_MISMATCH",
        )
    ]

    result = step("I am U00001234, where is my order?", rounds=rounds)

    assert result.action_input == {"user_id": "U00001234", "limit": 3}


def test_uncorrectable_rejection_ends_with_a_polite_answer():
    args = {"order_id": "#W1234567"}
    rounds = [error_round(1, "get_order", args, status_code=400, error_type="INVALID_PARAMETER")]

    result = step("Where is my order #W1234567?", rounds=rounds)

    assert result.action == FINAL_ANSWER
    assert "Sorry" in (result.final_answer or "")


# --- mistakes and hints -------------------------------------------------------------

SEARCHED = ok_round(1, "search_products", {"query": "Aurora Headphones"}, [{"sku": "AWH-2041-BLK"}])
MISTAKE_CASES = {
    "string_for_int": ("I am U00001234, where is my order?", [], "limit"),
    "name_for_sku": ("How much are the Aurora Headphones?", [], "search_products"),
    "skip_tool": ("Where is my order #W1234567?", [], "do not answer without calling a tool"),
    "malformed_json": ("Where is my order #W1234567?", [], "JSON"),
    "repeat_action": ("How much are the Aurora Headphones?", [SEARCHED], "repeat"),
}


def made_mistake(kind: str, text: str) -> bool:
    if kind == "malformed_json":
        try:
            ReasoningStep.model_validate_json(text)
        except ValidationError:
            return True
        return False
    result = ReasoningStep.model_validate_json(text)
    return {
        "string_for_int": result.action_input.get("limit") == "3",
        "name_for_sku": result.action_input == {"sku": "Aurora Headphones"},
        "skip_tool": result.action == FINAL_ANSWER,
        "repeat_action": result.action == "search_products",
    }[kind]


@pytest.mark.parametrize("kind", MISTAKES)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_mistake_fires_at_rate_one_and_never_at_zero(kind, seed):
    query, rounds, _ = MISTAKE_CASES[kind]

    always = complete(query, rounds=rounds, rates={**NO_MISTAKES, kind: 1.0}, seed=seed)
    never = complete(query, rounds=rounds, rates=NO_MISTAKES, seed=seed)

    assert made_mistake(kind, always.text)
    assert not made_mistake(kind, never.text)


@pytest.mark.parametrize("kind", MISTAKES)
@pytest.mark.parametrize(("follow_rate", "mistake_expected"), [(1.0, False), (0.0, True)])
def test_related_hint_prevents_the_mistake_when_followed(kind, follow_rate, mistake_expected):
    query, rounds, hint = MISTAKE_CASES[kind]

    response = complete(
        query,
        rounds=rounds,
        hints=[f"Mind this: {hint}."],
        rates={**NO_MISTAKES, kind: 1.0},
        hint_follow_rate=follow_rate,
    )

    assert made_mistake(kind, response.text) is mistake_expected


def test_unrelated_hint_does_not_prevent_a_mistake():
    response = complete(
        "How much are the Aurora Headphones?",
        hints=["Greet the customer by name."],
        rates={**NO_MISTAKES, "name_for_sku": 1.0},
        hint_follow_rate=1.0,
    )

    assert made_mistake("name_for_sku", response.text)


def test_skip_tool_invents_an_answer_without_a_tool():
    result = step("Where is my order #W1234567?", rates={**NO_MISTAKES, "skip_tool": 1.0})

    assert result.action == FINAL_ANSWER
    assert "#W1234567" in (result.final_answer or "")
    assert result.action_input == {}


@pytest.mark.parametrize(
    ("query", "rounds"),
    [
        ("Where is my order #W1234567?", []),
        ("How much are the Aurora Headphones?", [SEARCHED]),
        ("What is your return policy?", []),
        ("Where is my order?", []),
        ("Is AWH-2041-BLK in stock?", []),
    ],
)
@pytest.mark.parametrize("seed", range(5))
def test_output_without_malformed_json_parses_as_a_reasoning_step(query, rounds, seed):
    rates = {**dict.fromkeys(MISTAKES, 0.3), "malformed_json": 0.0}

    text = complete(query, rounds=rounds, rates=rates, seed=seed).text

    assert ReasoningStep.model_validate_json(text).action


# --- reflection ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rnd", "met", "next_move", "cause"),
    [
        (
            ok_round(1, "get_order", {"order_id": "#W1234567"}, ORDER_OBSERVATION),
            True,
            "continue",
            "",
        ),
        (
            error_round(
                1,
                "get_sku_price",
                {"sku": "Aurora Headphones"},
                status_code=404,
                error_type="RESOURCE_NOT_FOUND",
            ),
            False,
            "switch",
            "RESOURCE_NOT_FOUND: the sku looks like a product name",
        ),
        (
            error_round(
                1,
                "get_order",
                {"order_id": "#W1234567"},
                status_code=429,
                error_type="RATE_LIMITED",
            ),
            False,
            "continue",
            "RATE_LIMITED: upstream throttled",
        ),
        (
            error_round(
                1,
                "get_order",
                {"order_id": "#W1234567"},
                status_code=500,
                error_type="INTERNAL_SERVER_ERROR",
            ),
            False,
            "continue",
            "INTERNAL_SERVER_ERROR: upstream failure",
        ),
        (
            error_round(
                1, "get_order", {"order_id": "#W1234567"}, status_code=None, error_type="TIMEOUT"
            ),
            False,
            "continue",
            "TIMEOUT",
        ),
        (
            error_round(
                1,
                "get_order",
                {"order_id": 1},
                status_code=400,
                error_type="TYPE_MISMATCH",
                body={"field": "order_id", "expected_type": "string"},
            ),
            False,
            "switch",
            "TYPE_MISMATCH: an argument has the wrong type (order_id expects string)",
        ),
        (
            error_round(
                1,
                "get_order",
                {"order_id": "#W1234567"},
                status_code=None,
                error_type="TOOL_NOT_ALLOWED",
                body={"error": "tool get_order is suspended"},
            ),
            False,
            "stop",
            "TOOL_NOT_ALLOWED",
        ),
    ],
)
def test_reflection_judges_the_observation(rnd, met, next_move, cause):
    result = reflection(rnd)

    assert (result.expectation_met, result.next) == (met, next_move)
    assert result.likely_cause.startswith(cause)


# --- Self-RAG drafts and grades -------------------------------------------------------


@dataclass(frozen=True)
class Doc:
    slug: str
    title: str
    snippet: str


RETURNS_DOC = Doc(
    "returns-window",
    "Returning an item",
    "Most items can be returned within 45 days of delivery. Refunds go to the original "
    "payment method. Sale items are final.",
)
GIFT_DOC = Doc(
    "gift-wrap",
    "Gift wrapping",
    "Gift wrapping costs $4 per item and can be added at checkout.",
)


def rag_complete(
    schema: type[BaseModel],
    question: str,
    docs: list[Doc],
    draft: str = "",
    *,
    seed: int = 7,
    rates: dict[str, float] | None = None,
) -> LLMResponse:
    llm = SimulatedLLM(seed=seed, error_rates=rates or NO_MISTAKES, hint_follow_rate=0.0)
    if schema is RagDraft:
        messages = rag_draft_messages(question=question, docs=docs)
    else:
        messages = rag_grade_messages(question=question, docs=docs, draft=draft)
    return asyncio.run(llm.complete(messages=messages, schema=schema, purpose="rag"))


def rag_draft_of(question: str, docs: list[Doc]) -> RagDraft:
    return RagDraft.model_validate_json(rag_complete(RagDraft, question, docs).text)


def rag_grade_of(question: str, docs: list[Doc], draft: str) -> RagGrade:
    return RagGrade.model_validate_json(rag_complete(RagGrade, question, docs, draft).text)


def test_rag_draft_quotes_the_overlapping_sentence_and_cites_its_document():
    draft = rag_draft_of("How many days do I have to return an item?", [GIFT_DOC, RETURNS_DOC])

    assert draft.answer == "Most items can be returned within 45 days of delivery."
    assert draft.cited_slugs == ["returns-window"]


def test_rag_draft_covers_the_question_across_documents():
    draft = rag_draft_of("Can I return gift wrapping?", [RETURNS_DOC, GIFT_DOC])

    assert "returned within 45 days" in draft.answer
    assert "Gift wrapping costs $4" in draft.answer
    assert draft.cited_slugs == ["returns-window", "gift-wrap"]


@pytest.mark.parametrize("docs", [[], [GIFT_DOC]])
def test_rag_draft_says_it_does_not_know_when_nothing_overlaps(docs):
    draft = rag_draft_of("Do you ship to Antarctica?", docs)

    assert draft.answer.startswith("I don't know")
    assert draft.cited_slugs == []


@pytest.mark.parametrize(
    "draft",
    [
        "Most items can be returned within 45 days of delivery.",
        "Most items can be returned within 45 days of their delivery.",
        "most items can be returned within 45 days of delivery",
    ],
)
def test_rag_grade_accepts_a_near_verbatim_draft(draft):
    grade = rag_grade_of("How many days do I have to return an item?", [RETURNS_DOC], draft)

    assert (grade.is_grounded, grade.is_helpful) == (True, True)
    assert grade.improved_search_query is None


@pytest.mark.parametrize(
    "draft",
    [
        "Most items can be returned within 60 days of delivery.",
        "Items can be returned within 45 days and we pay the return shipping.",
        "Most items can be returned within 45 days of delivery. Returns are always free.",
    ],
)
def test_rag_grade_rejects_a_draft_with_an_unsupported_sentence(draft):
    grade = rag_grade_of("How many days do I have to return an item?", [RETURNS_DOC], draft)

    assert grade.is_grounded is False
    assert "Not supported" in grade.critique


def test_rag_grade_is_unhelpful_when_a_key_word_of_the_question_is_missing():
    question = "How many days do I have to return an item bought on sale?"
    draft = "Most items can be returned within 45 days of delivery."

    grade = rag_grade_of(question, [RETURNS_DOC], draft)

    assert (grade.is_grounded, grade.is_helpful) == (True, False)
    assert "bought" in grade.critique and "sale" in grade.critique
    assert grade.improved_search_query is not None
    assert grade.improved_search_query.split()[:2] == ["bought", "sale"]
    assert {"days", "return", "item"} <= set(grade.improved_search_query.split())


def test_rag_grade_calls_an_abstention_grounded_but_not_helpful():
    draft = "I don't know: the help articles I found do not cover this question."

    grade = rag_grade_of("Do you ship to Antarctica?", [GIFT_DOC], draft)

    assert (grade.is_grounded, grade.is_helpful) == (True, False)
    assert grade.improved_search_query == "ship antarctica"


def test_rag_answers_are_deterministic_per_seed_and_prompt():
    rates = dict.fromkeys(MISTAKES, 0.5)
    question = "How many days do I have to return an item?"

    texts = {
        rag_complete(RagGrade, question, [RETURNS_DOC], "Most items.", rates=rates).text
        for _ in range(5)
    }

    assert len(texts) == 1


@pytest.mark.parametrize("schema", [RagDraft, RagGrade])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_rag_output_is_malformed_at_rate_one(schema, seed):
    rates = {**NO_MISTAKES, "malformed_json": 1.0}

    response = rag_complete(schema, "Can I return it?", [RETURNS_DOC], "x", seed=seed, rates=rates)

    with pytest.raises(ValidationError):
        schema.model_validate_json(response.text)
