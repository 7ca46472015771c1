"""Policy versions as stable YAML: rendering, validation, versioning, import and diff."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import pytest

from policies.branches import branch_signature
from policies.documents import (
    PolicyChange,
    PolicyDocumentError,
    PolicyEntry,
    policy_diff,
    policy_document_parse,
    policy_document_render,
    policy_import,
    policy_import_preview,
    policy_version_create,
)
from policies.models import Policy, PolicyVersion, Strategy
from policies.selectors import runtime_policy_for_run
from reviews.models import AuditLog

BRANCHES: dict[str, dict[str, Any]] = {
    "adapter": {"tool": "get_order", "field": "order_id", "transform": "digits_to_int"},
    "error_handler": {
        "tool": "get_order",
        "on": "INTERNAL_SERVER_ERROR",
        "action": "degrade_cache",
    },
    "prompt_hint": {
        "text": "Call a tool before answering any order question.",
        "error_type": "HALLUCINATED_ANSWER",
    },
    "pre_condition": {
        "tool": "check_inventory",
        "arg": "sku",
        "not_pattern": "^[A-Z]{2,4}-\\d{4}-[A-Z0-9]{2,4}$",
        "call": "search_products",
        "input": {"query": "$arg"},
        "take": "results.0.skus.0.sku",
        "assign": "sku",
    },
    "validation_rule": {"tool": "search_products", "schema": {"required": ["query"]}},
}
ERROR_TYPES = {
    "adapter": "TYPE_MISMATCH",
    "error_handler": "INTERNAL_SERVER_ERROR",
    "prompt_hint": "HALLUCINATED_ANSWER",
    "pre_condition": "INVALID_PARAMETER",
    "validation_rule": "MISSING_REQUIRED_FIELD",
}
ROOT_CAUSES = {
    "adapter": "order id sent with a hash prefix",
    "error_handler": "upstream 500 on orders",
    "prompt_hint": "answered without calling any tool",
    "pre_condition": "product name passed where a sku is expected",
    "validation_rule": "search called without a query",
}
UPDATES = {
    "adapter": "send the order id as digits only",
    "error_handler": "degrade to cached order data",
    "prompt_hint": "ground every order answer in a tool result",
    "pre_condition": "look the sku up by name first",
    "validation_rule": "always pass a query to search",
}


def strategy_make(
    kind: str,
    *,
    branch: dict[str, Any] | None = None,
    intent: str = "",
    root_cause: str | None = None,
    strategy_update: str | None = None,
    **fields: Any,
) -> Strategy:
    """A stored strategy of ``kind`` with a valid branch, scoped by its branch's tool."""
    branch = dict(BRANCHES[kind] if branch is None else branch)
    tool = branch.get("tool", "")
    policy, _ = Policy.objects.get_or_create(intent=intent, tool_name=tool)
    values: dict[str, Any] = {
        "status": Strategy.Status.ACTIVE,
        "origin": "human",
        "error_type": ERROR_TYPES.get(kind, ""),
        **fields,
    }
    return Strategy.objects.create(
        policy=policy,
        kind=kind,
        tool_name=tool,
        intent=intent,
        root_cause=root_cause or ROOT_CAUSES.get(kind, "legacy rule"),
        strategy_update=strategy_update or UPDATES.get(kind, "legacy rule"),
        branch=branch,
        signature=branch_signature(kind, branch),
        **values,
    )


def entry_make(entry_id: int | None, kind: str, **fields: Any) -> PolicyEntry:
    """An unsaved entry, for tests of the pure render/parse functions."""
    branch = dict(fields.pop("branch", BRANCHES[kind]))
    values: dict[str, Any] = {
        "tool": branch.get("tool", ""),
        "intent": "",
        "error_type": ERROR_TYPES[kind],
        "root_cause": ROOT_CAUSES[kind],
        "strategy_update": UPDATES[kind],
        **fields,
    }
    return PolicyEntry(id=entry_id, kind=kind, branch=branch, **values)


# Scopes sort as '' < check_inventory < get_order < search_products, so get_order is scopes[2].
BASE_ENTRIES = [
    entry_make(1, "adapter"),
    entry_make(2, "error_handler"),
    entry_make(3, "prompt_hint"),
    entry_make(4, "pre_condition"),
    entry_make(5, "validation_rule"),
]
BASE_TEXT = policy_document_render(number=4, parent=3, strategies=BASE_ENTRIES)


def test_render_writes_the_documented_layout(db: None) -> None:
    strategy = strategy_make("error_handler")

    text = policy_document_render(number=4, parent=3, strategies=[strategy])

    assert text == (
        "version: 4\n"
        "parent: 3\n"
        "scopes:\n"
        "- tool: get_order\n"
        "  intent: ''\n"
        "  pre_conditions: []\n"
        "  validation_rules: []\n"
        "  error_handlers:\n"
        f"  - id: {strategy.pk}\n"
        "    error_type: INTERNAL_SERVER_ERROR\n"
        "    root_cause: upstream 500 on orders\n"
        "    strategy_update: degrade to cached order data\n"
        "    branch:\n"
        "      tool: get_order\n"
        "      'on': INTERNAL_SERVER_ERROR\n"
        "      action: degrade_cache\n"
        "  adapters: []\n"
        "  prompt_hints: []\n"
    )


def test_render_parse_render_is_byte_identical(db: None) -> None:
    strategies = [strategy_make(kind) for kind in BRANCHES]
    strategies.append(
        strategy_make(
            "prompt_hint",
            intent="order_status",
            branch={"text": "Überprüfe den Bestellstatus — immer.", "intent": "order_status"},
        )
    )
    text = policy_document_render(number=7, parent=None, strategies=strategies)

    document = policy_document_parse(text)

    assert document.render() == text
    assert policy_document_render(number=7, parent=None, strategies=document.entries) == text
    assert "Überprüfe" in text


def test_parse_returns_each_entry_with_its_scope_and_kind(db: None) -> None:
    strategy = strategy_make("adapter")
    text = policy_document_render(number=2, parent=1, strategies=[strategy])

    document = policy_document_parse(text)

    assert (document.number, document.parent) == (2, 1)
    assert document.entries == [
        PolicyEntry(
            id=strategy.pk,
            kind="adapter",
            tool="get_order",
            intent="",
            error_type="TYPE_MISMATCH",
            root_cause=ROOT_CAUSES["adapter"],
            strategy_update=UPDATES["adapter"],
            branch=BRANCHES["adapter"],
        )
    ]


@pytest.mark.parametrize("order", [(0, 1, 2, 3, 4, 5), (5, 4, 3, 2, 1, 0), (3, 0, 5, 1, 4, 2)])
def test_render_order_is_stable_whatever_the_input_order(db: None, order: tuple[int, ...]) -> None:
    strategies = [strategy_make(kind) for kind in BRANCHES]
    strategies.append(strategy_make("adapter", branch={**BRANCHES["adapter"], "field": "user_id"}))
    expected = policy_document_render(number=1, parent=None, strategies=strategies)

    shuffled = [strategies[index] for index in order]

    assert policy_document_render(number=1, parent=None, strategies=shuffled) == expected


def test_render_ignores_branch_key_order_at_every_depth(db: None) -> None:
    forward = strategy_make(
        "validation_rule",
        branch={
            "tool": "search_products",
            "schema": {"required": ["query"], "properties": {"query": {"type": "string"}}},
        },
    )
    backward = dataclasses.replace(
        PolicyEntry.from_strategy(forward),
        branch={
            "schema": {"properties": {"query": {"type": "string"}}, "required": ["query"]},
            "tool": "search_products",
        },
    )
    reloaded = Strategy.objects.get(pk=forward.pk)  # jsonb hands keys back in its own order

    texts = {
        policy_document_render(number=1, parent=None, strategies=[item])
        for item in (forward, backward, reloaded)
    }

    assert len(texts) == 1


def test_render_leaves_out_dynamic_fields_and_unknown_kinds(db: None) -> None:
    tracked = strategy_make(
        "adapter",
        confidence=0.93,
        applications=17,
        successes=11,
        status=Strategy.Status.DEPRECATED,
    )
    legacy = strategy_make("adapter", root_cause="a retired legacy rule kind")
    Strategy.objects.filter(pk=legacy.pk).update(kind="legacy_macro")
    legacy.refresh_from_db()

    text = policy_document_render(number=1, parent=None, strategies=[tracked, legacy])

    assert f"id: {tracked.pk}" in text
    assert "retired legacy" not in text
    for dynamic in ("confidence", "0.93", "applications", "17", "status", "deprecated"):
        assert dynamic not in text


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        pytest.param(
            "scopes:\n",
            "scopes: [\n",
            "line 4, column 1: YAML syntax error: expected the node content, but found '-'",
            id="yaml-syntax",
        ),
        pytest.param(
            "parent: 3\n",
            "parent: 3\nversion: 5\n",
            "line 3, column 1: YAML error: duplicate key 'version'",
            id="duplicate-yaml-key",
        ),
        pytest.param(
            "parent: 3\n", "parent: 3\nowner: me\n", "document: unexpected key 'owner'", id="top"
        ),
        pytest.param("parent: 3\n", "", "document: missing 'parent'", id="missing-top-key"),
        pytest.param(
            "version: 4\n",
            "version: four\n",
            "version: must be a positive integer, not 'four'",
            id="version-type",
        ),
        pytest.param(
            "  adapters:\n  - id: 1\n",
            "  adapter_rules:\n  - id: 1\n",
            "scopes[2]: unexpected key 'adapter_rules'",
            id="scope-key",
        ),
        pytest.param(
            "- tool: get_order\n  intent: ''\n",
            "- tool: get_order\n",
            "scopes[2]: missing 'intent'",
            id="scope-missing-intent",
        ),
        pytest.param(
            "  validation_rules: []\n  error_handlers:\n",
            "  validation_rules: none\n  error_handlers:\n",
            "scopes[2].validation_rules: must be a list (write [] for none)",
            id="list-type",
        ),
        pytest.param(
            "  - id: 1\n",
            "  - id: 1\n    confidence: 0.9\n",
            "scopes[2].adapters[0]: unexpected key 'confidence'",
            id="entry-key",
        ),
        pytest.param(
            "    root_cause: order id sent with a hash prefix\n",
            "",
            "scopes[2].adapters[0]: missing 'root_cause'",
            id="entry-missing-key",
        ),
        pytest.param(
            "  - id: 1\n",
            "  - id: one\n",
            "scopes[2].adapters[0].id: must be a strategy id (positive integer), not 'one'",
            id="id-type",
        ),
        pytest.param(
            "      transform: digits_to_int\n",
            "",
            "scopes[2].adapters[0].branch: missing 'transform'",
            id="branch-missing-key",
        ),
        pytest.param(
            "action: degrade_cache",
            "action: explode",
            "scopes[2].error_handlers[0].branch: action must be one of "
            "retry_once, wait_retry, degrade_cache, handover, call_tool",
            id="branch-invalid-value",
        ),
        pytest.param(
            "      tool: get_order\n      field: order_id\n",
            "      tool: get_user\n      field: order_id\n",
            "scopes[2].adapters[0].branch.tool: 'get_user' does not match the scope's tool "
            "'get_order'",
            id="branch-tool-mismatch",
        ),
        pytest.param(
            "      text: Call a tool before answering any order question.\n",
            "      text: Call a tool before answering any order question.\n      intent: refunds\n",
            "scopes[0].prompt_hints[0].branch.intent: 'refunds' does not match the scope's "
            "intent ''",
            id="branch-intent-mismatch",
        ),
        pytest.param(
            "root_cause: order id sent with a hash prefix",
            "root_cause: " + " ".join(["word"] * 16),
            "scopes[2].adapters[0].root_cause: 16 words; at most 15 allowed",
            id="root-cause-words",
        ),
        pytest.param(
            "strategy_update: send the order id as digits only",
            "strategy_update: " + " ".join(["word"] * 21),
            "scopes[2].adapters[0].strategy_update: 21 words; at most 20 allowed",
            id="strategy-update-words",
        ),
        pytest.param(
            "  - id: 2\n",
            "  - id: 1\n",
            "scopes[2].adapters[0].id: duplicate id 1 (also at scopes[2].error_handlers[0])",
            id="duplicate-id",
        ),
    ],
)
def test_parse_rejects_with_the_path_of_the_problem(old: str, new: str, message: str) -> None:
    assert BASE_TEXT.count(old) == 1
    text = BASE_TEXT.replace(old, new)

    with pytest.raises(PolicyDocumentError) as caught:
        policy_document_parse(text)

    assert caught.value.messages == [message]


def test_parse_reports_every_problem_at_once() -> None:
    text = BASE_TEXT.replace("      transform: digits_to_int\n", "").replace(
        "action: degrade_cache", "action: explode"
    )

    with pytest.raises(PolicyDocumentError) as caught:
        policy_document_parse(text)

    assert len(caught.value.messages) == 2
    assert str(caught.value) == "\n".join(caught.value.messages)


def test_parse_keeps_unquoted_yaml_words_as_strings() -> None:
    # Hand-edited files write ``on:`` unquoted; YAML 1.1 would read that key as True.
    text = BASE_TEXT.replace("'on': INTERNAL_SERVER_ERROR", "on: INTERNAL_SERVER_ERROR")

    document = policy_document_parse(text)

    handler = next(entry for entry in document.entries if entry.kind == "error_handler")
    assert handler.branch["on"] == "INTERNAL_SERVER_ERROR"
    assert document.render() == BASE_TEXT


def test_first_version_is_number_one_without_parent_and_active(db: None) -> None:
    strategies = [strategy_make("adapter"), strategy_make("error_handler")]

    version = policy_version_create(strategies=strategies, author_kind="initial")

    assert (version.number, version.parent, version.is_active) == (1, None, True)
    assert version.document.startswith("version: 1\nparent: null\n")
    assert set(version.strategies.all()) == set(strategies)


def test_next_version_takes_the_active_one_as_parent_and_replaces_it(db: None) -> None:
    first = policy_version_create(strategies=[strategy_make("adapter")], author_kind="initial")
    source = strategy_make("error_handler")

    second = policy_version_create(
        strategies=[*first.strategies.all(), source],
        author_kind="reviewer",
        note="approve S2",
        source_strategies=[source],
    )

    first.refresh_from_db()
    assert (second.number, second.parent, second.is_active) == (2, first, True)
    assert first.is_active is False
    assert list(PolicyVersion.objects.filter(is_active=True)) == [second]
    assert list(second.source_strategies.all()) == [source]
    assert second.document.startswith("version: 2\nparent: 1\n")


def test_inactive_version_leaves_the_active_one_in_place(db: None) -> None:
    first = policy_version_create(strategies=[strategy_make("adapter")], author_kind="initial")

    draft = policy_version_create(strategies=[], author_kind="reviewer", activate=False)
    third = policy_version_create(strategies=[], author_kind="reviewer")

    first.refresh_from_db()
    draft.refresh_from_db()
    assert (draft.number, draft.parent, draft.is_active) == (2, first, False)
    assert (third.number, third.parent, third.is_active) == (3, first, True)
    assert list(PolicyVersion.objects.filter(is_active=True)) == [third]


def test_version_checksum_is_the_sha256_of_its_document(db: None) -> None:
    version = policy_version_create(
        strategies=[strategy_make("prompt_hint")], author_kind="initial"
    )

    assert version.checksum == hashlib.sha256(version.document.encode("utf-8")).hexdigest()


def test_version_create_writes_an_audit_row(db: None, django_user_model: Any) -> None:
    user = django_user_model.objects.create_user(username="rev", password="pw-rev-12345")
    first = policy_version_create(strategies=[], author_kind="initial")
    strategies = [strategy_make("error_handler"), strategy_make("adapter")]

    version = policy_version_create(strategies=strategies, author=user, author_kind="reviewer")

    row = AuditLog.objects.get(action="policy_version.create", target="v2")
    assert (row.actor, row.actor_kind) == (user, "reviewer")
    assert row.details == {"strategies": sorted(s.pk for s in strategies), "parent": first.number}
    assert version.author == user


def test_version_create_rejects_an_unknown_author_kind(db: None) -> None:
    with pytest.raises(ValueError, match="unknown author_kind 'robot'"):
        policy_version_create(strategies=[], author_kind="robot")

    assert not PolicyVersion.objects.exists()


def test_export_edit_import_diff_shows_exactly_the_three_edits(db: None) -> None:
    adapter = strategy_make("adapter")
    handler = strategy_make("error_handler")
    strategy_make("prompt_hint")
    removed = strategy_make(
        "prompt_hint",
        branch={"text": "Quote the order status exactly as the tool returned it."},
        root_cause="status paraphrased wrongly",
        strategy_update="quote the tool's status verbatim",
    )
    strategy_make("validation_rule")
    v1 = policy_version_create(strategies=list(Strategy.objects.all()), author_kind="initial")
    removed_block = (
        f"  - id: {removed.pk}\n"
        "    error_type: HALLUCINATED_ANSWER\n"
        "    root_cause: status paraphrased wrongly\n"
        "    strategy_update: quote the tool's status verbatim\n"
        "    branch:\n"
        "      text: Quote the order status exactly as the tool returned it.\n"
    )
    added_fields = (
        "    error_type: TYPE_MISMATCH\n"
        "    root_cause: customer ids arrive with spaces\n"
        "    strategy_update: strip spaces from customer ids\n"
        "    branch:\n"
        "      tool: get_order\n"
        "      field: customer_id\n"
        "      transform: strip\n"
    )
    assert v1.document.count(removed_block) == 1
    edited = (
        v1.document.replace(
            "strategy_update: degrade to cached order data",
            "strategy_update: serve cached order data and say so",
        )
        .replace(removed_block, "")
        .replace(
            "      transform: digits_to_int\n",
            "      transform: digits_to_int\n  - " + added_fields.removeprefix("    "),
        )
    )

    v2 = policy_import(text=edited)
    diff = policy_diff(old=v1, new=v2)

    new = Strategy.objects.get(origin="import")
    assert [entry.id for entry in diff.added] == [new.pk]
    assert [entry.id for entry in diff.removed] == [removed.pk]
    assert diff.changed == [
        PolicyChange(
            handler.pk,
            "strategy_update",
            "degrade to cached order data",
            "serve cached order data and say so",
        )
    ]
    changed_lines = [
        line
        for line in diff.text.splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert sorted(changed_lines) == sorted(
        [
            "-version: 1",
            "+version: 2",
            "-parent: null",
            "+parent: 1",
            "-    strategy_update: degrade to cached order data",
            "+    strategy_update: serve cached order data and say so",
            *(f"-{line}" for line in removed_block.splitlines()),
            f"+  - id: {new.pk}",
            *(f"+{line}" for line in added_fields.splitlines()),
        ]
    )
    assert diff.text.startswith("--- v1\n+++ v2\n")
    assert set(v2.strategies.all()) == set(Strategy.objects.exclude(pk=removed.pk))
    assert adapter in v2.strategies.all()


def test_import_of_the_unchanged_document_is_a_noop(db: None) -> None:
    strategies = [strategy_make(kind) for kind in BRANCHES]
    active = policy_version_create(strategies=strategies, author_kind="initial")
    counts = (PolicyVersion.objects.count(), Strategy.objects.count(), AuditLog.objects.count())

    result = policy_import(text=active.document)

    assert result == active
    assert counts == (
        PolicyVersion.objects.count(),
        Strategy.objects.count(),
        AuditLog.objects.count(),
    )


def test_import_of_an_older_export_with_the_same_content_is_a_noop(db: None) -> None:
    strategies = [strategy_make("adapter")]
    v1 = policy_version_create(strategies=strategies, author_kind="initial")
    v2 = policy_version_create(strategies=strategies, author_kind="reviewer")

    result = policy_import(text=v1.document)

    assert result == v2
    assert PolicyVersion.objects.count() == 2


def test_import_edits_rules_but_keeps_status_and_confidence(db: None) -> None:
    adapter = strategy_make("adapter", confidence=0.42, status=Strategy.Status.APPROVED)
    version = policy_version_create(strategies=[adapter], author_kind="initial")
    edited = version.document.replace("transform: digits_to_int", "transform: strip")

    new_version = policy_import(text=edited)

    adapter.refresh_from_db()
    assert adapter.branch["transform"] == "strip"
    assert adapter.signature == branch_signature("adapter", adapter.branch)
    assert (adapter.confidence, adapter.status) == (0.42, Strategy.Status.APPROVED)
    assert list(new_version.source_strategies.all()) == [adapter]
    assert new_version.author_kind == PolicyVersion.AuthorKind.IMPORT
    assert new_version.parent == version


def test_import_creates_new_strategies_with_import_defaults(db: None) -> None:
    text = (
        "version: 1\n"
        "parent: null\n"
        "scopes:\n"
        "- tool: get_order\n"
        "  intent: order_status\n"
        "  adapters:\n"
        "  - error_type: TYPE_MISMATCH\n"
        "    root_cause: order id sent with a hash prefix\n"
        "    strategy_update: send the order id as digits only\n"
        "    branch:\n"
        "      tool: get_order\n"
        "      field: order_id\n"
        "      transform: digits_to_int\n"
    )

    version = policy_import(text=text)

    strategy = version.strategies.get()
    assert (strategy.status, strategy.origin, strategy.confidence) == ("active", "import", 0.7)
    assert strategy.signature == branch_signature("adapter", BRANCHES["adapter"])
    assert (strategy.policy.tool_name, strategy.policy.intent) == ("get_order", "order_status")
    assert (strategy.tool_name, strategy.intent, strategy.kind) == (
        "get_order",
        "order_status",
        "adapter",
    )
    assert (version.number, version.is_active) == (1, True)
    assert f"  - id: {strategy.pk}\n" in version.document


def test_import_rejects_an_unknown_id_and_writes_nothing(db: None) -> None:
    text = BASE_TEXT.replace("  - id: 1\n", "  - id: 999999\n")

    with pytest.raises(PolicyDocumentError) as caught:
        policy_import(text=text)

    assert "scopes[2].adapters[0].id: strategy 999999 does not exist" in caught.value.messages
    assert not PolicyVersion.objects.exists()
    assert not Strategy.objects.exists()


def test_import_preview_shows_the_diff_without_writing(db: None) -> None:
    adapter = strategy_make("adapter")
    active = policy_version_create(strategies=[adapter], author_kind="initial")
    edited = active.document.replace("transform: digits_to_int", "transform: strip")

    preview = policy_import_preview(text=edited)

    assert preview.is_noop is False
    assert [entry.id for entry in preview.to_update] == [adapter.pk]
    assert preview.diff.changed == [
        PolicyChange(adapter.pk, "branch.transform", "digits_to_int", "strip")
    ]
    assert "+      transform: strip" in preview.diff.text
    assert PolicyVersion.objects.count() == 1
    adapter.refresh_from_db()
    assert adapter.branch["transform"] == "digits_to_int"


def test_diff_as_dict_is_json_serialisable(db: None) -> None:
    adapter = strategy_make("adapter")
    v1 = policy_version_create(strategies=[adapter], author_kind="initial")
    v2 = policy_version_create(
        strategies=[adapter, strategy_make("validation_rule")], author_kind="reviewer"
    )

    data = json.loads(json.dumps(policy_diff(old=v1, new=v2).as_dict()))

    assert (data["old"], data["new"]) == ("v1", "v2")
    assert [entry["kind"] for entry in data["added"]] == ["validation_rule"]
    assert data["removed"] == [] and data["changed"] == []
    assert data["text"].startswith("--- v1\n+++ v2\n")


def test_an_import_reaches_the_runtime_policy(
    db: None, django_capture_on_commit_callbacks: Any
) -> None:
    adapter = strategy_make("adapter")
    version = policy_version_create(strategies=[adapter], author_kind="initial")
    assert runtime_policy_for_run().adapters["get_order"][0].transform == "digits_to_int"

    with django_capture_on_commit_callbacks(execute=True):
        policy_import(text=version.document.replace("transform: digits_to_int", "transform: strip"))

    policy = runtime_policy_for_run()
    assert policy.version == "v2"
    assert policy.adapters["get_order"][0].transform == "strip"


def test_an_imported_document_keeps_no_secret_pasted_into_a_rule(db: None) -> None:
    adapter = strategy_make("adapter")
    version = policy_version_create(strategies=[adapter], author_kind="initial")
    key = "sk-live-0123456789abcdef"
    edited = version.document.replace(
        f"root_cause: {adapter.root_cause}", f"root_cause: seen with {key}"
    )
    assert edited != version.document

    new_version = policy_import(text=edited)

    adapter.refresh_from_db()
    assert adapter.root_cause == "seen with [REDACTED]"
    assert key not in new_version.document
    assert policy_import(text=edited) == new_version  # the same upload again: nothing new
