"""Tests of the parsers that read reasoning and reflection replies from models."""

# The full-width and typographic punctuation in these cases is the point of the tests.

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.llm.schemas import FINAL_ANSWER, Reflection
from agents.parsing import ModelFormatError, parse_reasoning, parse_reflection

STEP = {
    "thought": "I need the order.",
    "action": "get_order",
    "action_input": {"order_id": "#W1234567"},
    "expectation": "The order with its status.",
}


def test_strict_json_object() -> None:
    step, mode = parse_reasoning(json.dumps(STEP))

    assert mode == "strict"
    assert step.model_dump() == {**STEP, "final_answer": None}


@pytest.mark.parametrize(
    "template",
    [
        "```json\n{body}\n```",
        "```JSON\n{body}\n```",
        "```\n{body}\n```",
        "  \n```json {body}```\n",
    ],
)
def test_fenced_json_is_strict(template: str) -> None:
    step, mode = parse_reasoning(template.format(body=json.dumps(STEP)))

    assert mode == "strict"
    assert step.action == "get_order"
    assert step.action_input == {"order_id": "#W1234567"}


def test_strict_final_answer() -> None:
    text = json.dumps({"thought": "done", "action": "final_answer", "final_answer": "Shipped."})

    step, mode = parse_reasoning(text)

    assert mode == "strict"
    assert step.is_final
    assert step.final_answer == "Shipped."


@pytest.mark.parametrize(
    ("action_line", "expected_input"),
    [
        ('get_order(order_id="#W1234567", limit=3)', {"order_id": "#W1234567", "limit": 3}),
        ("get_order(order_id='#W1234567', limit=3)", {"order_id": "#W1234567", "limit": 3}),
        ("get_order(order_id=#W1234567, limit=3)", {"order_id": "#W1234567", "limit": 3}),
        ('get_order( order_id = "#W1234567" ,  limit = 3 )', {"order_id": "#W1234567", "limit": 3}),
        ('get_order(order_id: "#W1234567", limit: 3)', {"order_id": "#W1234567", "limit": 3}),
        ('get_order({"order_id": "#W1234567", "limit": 3})', {"order_id": "#W1234567", "limit": 3}),
        ("get_order({'order_id': '#W1234567', 'limit': 3})", {"order_id": "#W1234567", "limit": 3}),
        ('get_order {"order_id": "#W1234567", "limit": 3}', {"order_id": "#W1234567", "limit": 3}),
        ('`get_order(order_id="#W1234567")`', {"order_id": "#W1234567"}),
        ("get_order（order_id＝“#W1234567”，limit＝3）", {"order_id": "#W1234567", "limit": 3}),
        ("get_order（order_id：‘#W1234567’，limit：3）", {"order_id": "#W1234567", "limit": 3}),
        (
            "get_order(order_id=“#W1234567\", note='it’s late')",
            {"order_id": "#W1234567", "note": "it’s late"},
        ),
        ("get_order(order_id=＂#W1234567＂)", {"order_id": "#W1234567"}),
        ('search(query="red, large", page=2)', {"query": "red, large", "page": 2}),
        ('search(query="a=b: c")', {"query": "a=b: c"}),
        ('search(query="say \\"hi\\"")', {"query": 'say "hi"'}),
        ("search(q=O'Brien)", {"q": "O'Brien"}),
        (
            "update(qty=2, price=9.5, gift=true, express=False, note=null, ref=None)",
            {"qty": 2, "price": 9.5, "gift": True, "express": False, "note": None, "ref": None},
        ),
        (
            'update(qty="2", zip="02134", phone=+14155550100, code=007)',
            {"qty": "2", "zip": "02134", "phone": "+14155550100", "code": "007"},
        ),
        (
            'update(items=["A1", "B2"], filters={"status": "open"})',
            {"items": ["A1", "B2"], "filters": {"status": "open"}},
        ),
        ("list_orders()", {}),
        ("list_orders", {}),
        ("list_orders(limit=5,)", {"limit": 5}),
        (
            'get_order(\n    order_id="#W1234567",\n    limit=3\n)',
            {"order_id": "#W1234567", "limit": 3},
        ),
    ],
)
def test_lenient_action_line(action_line: str, expected_input: dict[str, Any]) -> None:
    text = f"Thought: I need the order.\nAction: {action_line}\nExpectation: the order record"

    step, mode = parse_reasoning(text)

    assert mode == "lenient"
    assert step.thought == "I need the order."
    assert step.action == action_line.strip("`").split("(")[0].split("（")[0].split(" ")[0]
    assert step.action_input == expected_input
    assert step.expectation == "the order record"


@pytest.mark.parametrize(
    "text",
    [
        'Thought: I need the order.\nAction: get_order(order_id="#W1")',
        'thought:   I need the order.\naction:get_order(order_id="#W1")',
        'Thought：I need the order.\nAction：get_order(order_id="#W1")',
        '**Thought:** I need the order.\n**Action:** get_order(order_id="#W1")',
        'Thought: I need the order.\n\nAction: get_order(order_id="#W1")\nObservation: (made up)',
        'Thought: I need the order.\nAction: get_order\nAction Input: {"order_id": "#W1"}',
        'Thought: I need the order.\nAction: get_order\nAction Input: order_id="#W1"',
    ],
)
def test_lenient_label_variants(text: str) -> None:
    step, mode = parse_reasoning(text)

    assert mode == "lenient"
    assert step.thought == "I need the order."
    assert step.action == "get_order"
    assert step.action_input == {"order_id": "#W1"}


def test_multi_line_thought_is_kept() -> None:
    step, _ = parse_reasoning("Thought: first line\nsecond line\nAction: list_orders()")

    assert step.thought == "first line\nsecond line"


@pytest.mark.parametrize(
    "text",
    [
        "Thought: I have everything.\nFinal Answer: Your order #W1 shipped on May 2.",
        "Thought: I have everything.\nAction: final_answer\n"
        "Final Answer: Your order #W1 shipped on May 2.",
        "Thought: I have everything.\nfinal answer： Your order #W1 shipped on May 2.",
        'Thought: I have everything.\nAction: final_answer("Your order #W1 shipped on May 2.")',
        "Thought: I have everything.\n"
        'Action: final_answer(answer="Your order #W1 shipped on May 2.")',
    ],
)
def test_lenient_final_answer(text: str) -> None:
    step, mode = parse_reasoning(text)

    assert mode == "lenient"
    assert step.action == FINAL_ANSWER
    assert step.is_final
    assert step.final_answer == "Your order #W1 shipped on May 2."
    assert step.thought == "I have everything."


def test_multi_line_final_answer() -> None:
    step, _ = parse_reasoning("Final Answer: Dear customer,\nyour order shipped.")

    assert step.final_answer == "Dear customer,\nyour order shipped."


def test_json_embedded_in_prose_is_lenient() -> None:
    text = f"Sure! Here is my next step:\n{json.dumps(STEP)}\nLet me know if that helps."

    step, mode = parse_reasoning(text)

    assert mode == "lenient"
    assert step.action == "get_order"
    assert step.action_input == {"order_id": "#W1234567"}


def test_embedded_json_skips_objects_that_are_not_steps() -> None:
    text = (
        'Context {"order_id": "#W1"} then '
        '{"action": "get_order", "action_input": {"order_id": "#W1"}}'
    )

    step, mode = parse_reasoning(text)

    assert mode == "lenient"
    assert step.action_input == {"order_id": "#W1"}


@pytest.mark.parametrize(
    ("text", "reason_fragment"),
    [
        ("", "empty"),
        ("I think the order is probably shipped.", "no 'Action:' line"),
        ("[1, 2, 3]", "not an object"),
        ('{"thought": "x"}', "action is missing"),
        ('{"action": "get order", "action_input": {}}', "is not a tool name"),
        ('{"action": "get_order", "action_input": "#W1"}', "action_input"),
        ('{"action": "final_answer"}', "final_answer"),
        ("Action: get-order(order_id=1)", "is not a tool name"),
        ("Action: get_order(order_id=1", "no closing parenthesis"),
        ("Action: get_order(order_id=1) and then more", "Unexpected text"),
        ('Action: get_order("#W1")', "must be named"),
        ('Action: get_order(order_id="#W1)', "quoted value"),
        ("Action: get_order(order_id=1, order_id=2)", "given twice"),
        ("Action: get_order(1bad=2)", "not a valid parameter name"),
        ("Action: a()\nAction: b()", "exactly one tool"),
        ("Action: get_order()\nFinal Answer: done", "both an 'Action:' and a 'Final Answer:'"),
        ("Action: final_answer", "no answer text"),
        ("Action: get_order some words", "Could not read the call"),
    ],
)
def test_unreadable_reasoning_raises_with_reason(text: str, reason_fragment: str) -> None:
    with pytest.raises(ModelFormatError) as excinfo:
        parse_reasoning(text)

    assert reason_fragment in excinfo.value.reason
    assert '"action"' in excinfo.value.reason
    assert excinfo.value.raw == text


@pytest.mark.parametrize(
    ("field", "size", "limit"),
    [("thought", 4001, 4000), ("expectation", 1001, 1000), ("action", 101, 100)],
)
def test_oversized_field_raises(field: str, size: int, limit: int) -> None:
    text = json.dumps({**STEP, field: "x" * size})

    with pytest.raises(ModelFormatError) as excinfo:
        parse_reasoning(text)

    assert f"{field} is too long (at most {limit} characters)" in excinfo.value.reason
    assert excinfo.value.raw == text[:500]


def test_oversized_lenient_final_answer_raises() -> None:
    with pytest.raises(ModelFormatError, match="final_answer is too long"):
        parse_reasoning("Final Answer: " + "x" * 8001)


def test_huge_reply_is_rejected() -> None:
    with pytest.raises(ModelFormatError, match="characters long"):
        parse_reasoning("{" * 60_000)


# --- reflection --------------------------------------------------------------------------


def test_reflection_strict_json() -> None:
    text = '{"expectation_met": false, "likely_cause": "wrong id", "next": "switch"}'

    assert parse_reflection(text) == Reflection(
        expectation_met=False, likely_cause="wrong id", next="switch"
    )


def test_reflection_fenced_json() -> None:
    reflection = parse_reflection('```json\n{"expectation_met": true}\n```')

    assert reflection == Reflection(expectation_met=True, likely_cause="", next="continue")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Expectation met: no\nCause: the order id was wrong\nNext: switch",
            Reflection(expectation_met=False, likely_cause="the order id was wrong", next="switch"),
        ),
        (
            "Expectation met: Yes.\nNext: continue",
            Reflection(expectation_met=True, next="continue"),
        ),
        (
            "expectation_met = true\nlikely cause: n/a\nnext: STOP",
            Reflection(expectation_met=True, likely_cause="n/a", next="stop"),
        ),
        (
            "Expectation met：false\nLikely cause：timeout\nNext move：switch strategy",
            Reflection(expectation_met=False, likely_cause="timeout", next="switch"),
        ),
        (
            "**Expectation met:** no, the list was empty\n**Next:** switch",
            Reflection(expectation_met=False, next="switch"),
        ),
        (
            'My reflection: {"expectation_met": true, "next": "stop"} done.',
            Reflection(expectation_met=True, next="stop"),
        ),
    ],
)
def test_reflection_lenient(text: str, expected: Reflection) -> None:
    assert parse_reflection(text) == expected


@pytest.mark.parametrize(
    ("text", "reason_fragment"),
    [
        ("", "empty"),
        ("Everything looks fine to me.", "expectation_met"),
        ("Expectation met: perhaps", "yes or no"),
        ("Expectation met: yes\nNext: retry", "continue, switch or stop"),
        ('{"expectation_met": "maybe"}', "expectation_met"),
        ('{"expectation_met": true, "next": "later"}', "next"),
        (
            json.dumps({"expectation_met": True, "likely_cause": "x" * 1001}),
            "likely_cause is too long",
        ),
    ],
)
def test_unreadable_reflection_raises(text: str, reason_fragment: str) -> None:
    with pytest.raises(ModelFormatError) as excinfo:
        parse_reflection(text)

    assert reason_fragment in excinfo.value.reason
    assert '"expectation_met"' in excinfo.value.reason
