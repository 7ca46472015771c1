"""Policy versions as stable, diff-friendly YAML documents: render, parse, import, diff.

A PolicyVersion stores its document as text. The layout is fixed (our key order, never
``sort_keys``; scopes sorted by tool and intent; strategies by id; every scope has all five
lists) so two versions differ only where their strategies differ, and ``git diff`` or
``policy diff`` shows exactly what a reviewer changed. Dynamic fields (confidence, counts,
status) are deliberately absent: they change on every run while the version is immutable.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import yaml
from django.db import transaction
from django.db.models import Max

from config.safe_yaml import PlainSafeDumper, PlainSafeLoader, yaml_load_plain
from policies.branches import branch_errors, branch_signature
from policies.models import Policy, PolicyVersion, Strategy
from policies.selectors import policy_version_active, runtime_policy_cache_clear
from policies.signals import audit_event
from traces.redaction import redact_text, redact_value

# Document list name per strategy kind, in the order the lists appear in every scope.
KIND_LISTS: dict[str, str] = {
    "pre_condition": "pre_conditions",
    "validation_rule": "validation_rules",
    "error_handler": "error_handlers",
    "adapter": "adapters",
    "prompt_hint": "prompt_hints",
}
LIST_KINDS: dict[str, str] = {name: kind for kind, name in KIND_LISTS.items()}

TOP_KEYS = ("version", "parent", "scopes")
SCOPE_KEYS = ("tool", "intent", *KIND_LISTS.values())
ENTRY_KEYS = ("id", "error_type", "root_cause", "strategy_update", "branch")
ENTRY_REQUIRED = ("root_cause", "strategy_update", "branch")

ROOT_CAUSE_MAX_WORDS = 15
STRATEGY_UPDATE_MAX_WORDS = 20

# Reading order of a branch's own keys: scope first, then what the rule does. Keys not listed
# follow sorted, so the order stays stable whatever order the JSON came back from the DB in.
_BRANCH_KEY_ORDER: dict[str, tuple[str, ...]] = {
    "pre_condition": ("tool", "intent", "arg", "not_pattern", "call", "input", "take", "assign"),
    "validation_rule": ("tool", "intent", "schema"),
    "error_handler": (
        "tool",
        "intent",
        "on",
        "action",
        "call",
        "input",
        "transform",
        "max_retries",
        "max_wait_s",
    ),
    "adapter": ("tool", "intent", "field", "transform", "steps"),
    "prompt_hint": ("tool", "intent", "text", "error_type"),
}

_DUMP_OPTIONS: dict[str, Any] = {
    "sort_keys": False,
    "allow_unicode": True,
    "default_flow_style": False,
    "width": 100,
}


class PolicyDocumentError(ValueError):
    """A document that cannot become a version; ``messages`` holds every problem with its path."""

    def __init__(self, messages: Sequence[str]) -> None:
        self.messages = list(messages)
        super().__init__("\n".join(self.messages))


@dataclass(frozen=True)
class PolicyEntry:
    """One strategy as the document states it (``id`` is None for a strategy not yet stored)."""

    id: int | None
    kind: str
    tool: str
    intent: str
    error_type: str
    root_cause: str
    strategy_update: str
    branch: dict[str, Any]
    # Where the entry sits in the parsed text, for error messages; not part of its identity.
    path: str = field(default="", compare=False, repr=False)

    @classmethod
    def from_strategy(cls, strategy: Strategy) -> PolicyEntry:
        return cls(
            id=strategy.pk,
            kind=strategy.kind,
            tool=strategy.tool_name,
            intent=strategy.intent,
            error_type=strategy.error_type,
            root_cause=strategy.root_cause,
            strategy_update=strategy.strategy_update,
            branch=strategy.branch,
        )

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("path")
        return data


@dataclass(frozen=True)
class PolicyDocument:
    """A parsed, validated policy document."""

    number: int
    parent: int | None
    entries: list[PolicyEntry]

    def render(self) -> str:
        return policy_document_render(
            number=self.number, parent=self.parent, strategies=self.entries
        )


@dataclass(frozen=True)
class PolicyChange:
    """One field of one strategy that differs between two documents."""

    id: int
    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class PolicyDiff:
    """What changed between two documents, by strategy id, plus the unified text diff."""

    old_label: str
    new_label: str
    added: list[PolicyEntry]
    removed: list[PolicyEntry]
    changed: list[PolicyChange]
    text: str

    @property
    def is_empty(self) -> bool:
        return not (self.added or self.removed or self.changed)

    @property
    def summary(self) -> str:
        return f"{len(self.added)} added, {len(self.removed)} removed, {len(self.changed)} changed"

    def as_dict(self) -> dict[str, Any]:
        return {
            "old": self.old_label,
            "new": self.new_label,
            "added": [entry.as_dict() for entry in self.added],
            "removed": [entry.as_dict() for entry in self.removed],
            "changed": [asdict(change) for change in self.changed],
            "text": self.text,
        }


@dataclass(frozen=True)
class PolicyImportPreview:
    """What importing a document would do, computed without writing anything."""

    document: PolicyDocument
    active: PolicyVersion | None
    # The document as the new version would store it (number and parent filled in).
    rendered: str
    diff: PolicyDiff
    to_create: list[PolicyEntry]
    to_update: list[PolicyEntry]

    @property
    def is_noop(self) -> bool:
        return self.active is not None and _same_content_as(self.document, self.active)


# --- rendering ------------------------------------------------------------------------------


def policy_document_render(
    *, number: int, parent: int | None, strategies: Iterable[Strategy | PolicyEntry]
) -> str:
    """The YAML document of a version holding ``strategies``; pure, byte-stable.

    Strategy rows and parsed entries render identically, so parse-then-render reproduces
    the text exactly. Strategies whose kind has no list are left out.
    """
    entries = [
        item if isinstance(item, PolicyEntry) else PolicyEntry.from_strategy(item)
        for item in strategies
    ]
    scopes: dict[tuple[str, str], dict[str, list[PolicyEntry]]] = {}
    for entry in entries:
        list_name = KIND_LISTS.get(entry.kind)
        if list_name is None:
            continue
        lists = scopes.setdefault((entry.tool, entry.intent), {name: [] for name in LIST_KINDS})
        lists[list_name].append(entry)
    data: dict[str, Any] = {
        "version": number,
        "parent": parent,
        "scopes": [
            {
                "tool": tool,
                "intent": intent,
                **{
                    name: [_entry_data(entry) for entry in sorted(items, key=_entry_order)]
                    for name, items in lists.items()
                },
            }
            for (tool, intent), lists in sorted(scopes.items())
        ],
    }
    return yaml.dump(data, Dumper=PlainSafeDumper, **_DUMP_OPTIONS)


def policy_document_checksum(text: str) -> str:
    """sha256 hex of the document text, as stored on PolicyVersion.checksum."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _entry_order(entry: PolicyEntry) -> tuple[int, int]:
    # New entries (no id yet) go last; sorted() is stable so they keep the order written.
    return (0, entry.id) if entry.id is not None else (1, 0)


def _entry_data(entry: PolicyEntry) -> dict[str, Any]:
    data: dict[str, Any] = {} if entry.id is None else {"id": entry.id}
    data["error_type"] = entry.error_type
    data["root_cause"] = entry.root_cause
    data["strategy_update"] = entry.strategy_update
    data["branch"] = _branch_data(entry.kind, entry.branch)
    return data


def _branch_data(kind: str, branch: Any) -> Any:
    if not isinstance(branch, dict):
        return branch
    order = _BRANCH_KEY_ORDER.get(kind, ())
    known = [key for key in order if key in branch]
    rest = sorted((key for key in branch if key not in order), key=str)
    return {key: _canonical(branch[key]) for key in [*known, *rest]}


def _canonical(value: Any) -> Any:
    # jsonb returns nested keys in its own storage order; sorting keeps the text stable.
    if isinstance(value, dict):
        return {key: _canonical(value[key]) for key in sorted(value, key=str)}
    if isinstance(value, list):
        return [_canonical(item) for item in value]
    return value


# --- parsing --------------------------------------------------------------------------------


class _DocumentLoader(PlainSafeLoader):
    """SafeLoader with YAML 1.2 booleans and duplicate-key detection, and no aliases.

    People edit these files by hand: an unquoted ``on:`` (an error handler key) must stay the
    string "on" rather than YAML 1.1's True, and a key written twice must be reported rather
    than silently keeping the last value.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):
                continue  # unhashable keys are reported by the base constructor
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


_BOOL_TAG = "tag:yaml.org,2002:bool"
_DocumentLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_DocumentLoader.add_implicit_resolver(
    _BOOL_TAG, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)


def policy_document_parse(text: str) -> PolicyDocument:
    """Parse and validate a policy document; raise PolicyDocumentError listing every problem."""
    try:
        data = yaml_load_plain(text, loader=_DocumentLoader)
    except yaml.YAMLError as exc:
        raise PolicyDocumentError([_yaml_error_message(exc)]) from exc
    errors: list[str] = []
    if not isinstance(data, dict):
        raise PolicyDocumentError(["document: must be a mapping with version, parent and scopes"])
    errors += _key_errors("document", data, allowed=TOP_KEYS, required=TOP_KEYS)
    number = data.get("version")
    if "version" in data and not _is_positive_int(number):
        errors.append(f"version: must be a positive integer, not {number!r}")
    parent = data.get("parent")
    if parent is not None and not _is_positive_int(parent):
        errors.append(f"parent: must be a positive integer or null, not {parent!r}")
    scopes = data.get("scopes", [])
    entries: list[PolicyEntry] = []
    if not isinstance(scopes, list):
        errors.append("scopes: must be a list")
        scopes = []
    seen_scopes: dict[tuple[Any, Any], str] = {}
    for index, scope in enumerate(scopes):
        path = f"scopes[{index}]"
        if not isinstance(scope, dict):
            errors.append(f"{path}: must be a mapping with tool, intent and the strategy lists")
            continue
        errors += _key_errors(path, scope, allowed=SCOPE_KEYS, required=("tool", "intent"))
        tool, intent = scope.get("tool", ""), scope.get("intent", "")
        for name, value in (("tool", tool), ("intent", intent)):
            if not isinstance(value, str):
                errors.append(f"{path}.{name}: must be a string ('' for any), not {value!r}")
        if isinstance(tool, str) and isinstance(intent, str):
            if (tool, intent) in seen_scopes:
                errors.append(
                    f"{path}: duplicate scope tool={tool!r} intent={intent!r} "
                    f"(also at {seen_scopes[(tool, intent)]})"
                )
            seen_scopes[(tool, intent)] = path
        for list_name, kind in LIST_KINDS.items():
            items = scope.get(list_name, [])
            if not isinstance(items, list):
                errors.append(f"{path}.{list_name}: must be a list (write [] for none)")
                continue
            for position, item in enumerate(items):
                entry, entry_errors = _parse_entry(
                    f"{path}.{list_name}[{position}]", kind, tool, intent, item
                )
                errors += entry_errors
                if entry is not None:
                    entries.append(entry)
    errors += _duplicate_id_errors(entries)
    if errors:
        raise PolicyDocumentError(errors)
    assert isinstance(number, int)  # checked above; tells the type checker
    return PolicyDocument(number=number, parent=parent, entries=entries)


def _parse_entry(
    path: str, kind: str, tool: Any, intent: Any, item: Any
) -> tuple[PolicyEntry | None, list[str]]:
    if not isinstance(item, dict):
        return None, [f"{path}: must be a mapping with {', '.join(ENTRY_KEYS)}"]
    errors = _key_errors(path, item, allowed=ENTRY_KEYS, required=ENTRY_REQUIRED)
    entry_id = item.get("id")
    if entry_id is not None and not _is_positive_int(entry_id):
        errors.append(f"{path}.id: must be a strategy id (positive integer), not {entry_id!r}")
    error_type = item.get("error_type", "")
    if not isinstance(error_type, str):
        errors.append(f"{path}.error_type: must be a string, not {error_type!r}")
    errors += _text_errors(
        f"{path}.root_cause", item.get("root_cause"), ROOT_CAUSE_MAX_WORDS, max_chars=200
    )
    errors += _text_errors(
        f"{path}.strategy_update",
        item.get("strategy_update"),
        STRATEGY_UPDATE_MAX_WORDS,
        max_chars=250,
    )
    # An uploaded document is people's text: redacted before it is checked, like a
    # reviewer's edit, so that no credential pasted into a rule is stored or rendered.
    branch = redact_value(item.get("branch"))
    if "branch" in item:
        errors += _branch_errors(f"{path}.branch", kind, tool, intent, branch)
    if errors:
        return None, errors
    assert isinstance(branch, dict)  # branch_errors accepted it, so it is a mapping
    entry = PolicyEntry(
        id=entry_id,
        kind=kind,
        tool=tool,
        intent=intent,
        error_type=error_type,
        root_cause=redact_text(item["root_cause"]),
        strategy_update=redact_text(item["strategy_update"]),
        branch=branch,
        path=path,
    )
    return entry, []


def _branch_errors(path: str, kind: str, tool: Any, intent: Any, branch: Any) -> list[str]:
    if isinstance(branch, dict):
        odd_keys = [key for key in branch if not isinstance(key, str)]
        if odd_keys:
            return [f"{path}: keys must be strings, not {key!r}" for key in odd_keys]
    errors = [f"{path}: {message}" for message in branch_errors(kind, branch)]
    if not isinstance(branch, dict):
        return errors
    # The runtime files a rule under its branch's tool (and a hint under its intent); a
    # mismatch would make the document say one thing while the agent does another.
    branch_tool = branch.get("tool", "")
    if isinstance(tool, str) and branch_tool != tool:
        errors.append(f"{path}.tool: {branch_tool!r} does not match the scope's tool {tool!r}")
    if "intent" in branch and isinstance(intent, str) and branch["intent"] != intent:
        errors.append(
            f"{path}.intent: {branch['intent']!r} does not match the scope's intent {intent!r}"
        )
    return errors


def _text_errors(path: str, value: Any, max_words: int, *, max_chars: int) -> list[str]:
    if value is None:
        return []  # reported as a missing key
    if not isinstance(value, str) or not value.strip():
        return [f"{path}: must be a non-empty string"]
    words = len(value.split())
    if words > max_words:
        return [f"{path}: {words} words; at most {max_words} allowed"]
    if len(value) > max_chars:
        return [f"{path}: {len(value)} characters; at most {max_chars} allowed"]
    return []


def _key_errors(
    path: str, data: dict[Any, Any], *, allowed: Sequence[str], required: Sequence[str]
) -> list[str]:
    errors = [f"{path}: missing {key!r}" for key in required if key not in data]
    errors += [f"{path}: unexpected key {key!r}" for key in data if key not in allowed]
    return errors


def _duplicate_id_errors(entries: list[PolicyEntry]) -> list[str]:
    first_seen: dict[int, str] = {}
    errors = []
    for entry in entries:
        if entry.id is None:
            continue
        if entry.id in first_seen:
            errors.append(
                f"{entry.path}.id: duplicate id {entry.id} (also at {first_seen[entry.id]})"
            )
        else:
            first_seen[entry.id] = entry.path
    return errors


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _yaml_error_message(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc)
    # A constructor error (a duplicate key) is valid syntax with a bad meaning.
    kind = (
        "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
    )
    if mark is None:
        return f"{kind}: {problem}"
    return f"line {mark.line + 1}, column {mark.column + 1}: {kind}: {problem}"


# --- reads ----------------------------------------------------------------------------------


def policy_version_get(*, number: int) -> PolicyVersion | None:
    """Version ``number``, or None when there is no such version."""
    return PolicyVersion.objects.select_related("parent").filter(number=number).first()


# --- writes ---------------------------------------------------------------------------------


def policy_version_create(
    *,
    strategies: list[Strategy],
    author: Any = None,
    author_kind: str,
    note: str = "",
    source_strategies: Sequence[Strategy] = (),
    activate: bool = True,
) -> PolicyVersion:
    """Snapshot ``strategies`` as the next version; by default it becomes the active one.

    The active row is locked first so two concurrent creators cannot both take the same
    number or both claim to be the child of the same parent.
    """
    if author_kind not in PolicyVersion.AuthorKind.values:
        raise ValueError(f"unknown author_kind {author_kind!r}")
    with transaction.atomic():
        active = PolicyVersion.objects.select_for_update().filter(is_active=True).first()
        highest = PolicyVersion.objects.aggregate(highest=Max("number"))["highest"]
        number = (highest or 0) + 1
        document = policy_document_render(
            number=number,
            parent=active.number if active else None,
            strategies=strategies,
        )
        if activate and active is not None:
            # The partial unique constraint allows one active row: clear the old one first.
            PolicyVersion.objects.filter(pk=active.pk).update(is_active=False)
            active.is_active = False
        version = PolicyVersion.objects.create(
            number=number,
            parent=active,
            author=author,
            author_kind=author_kind,
            document=document,
            checksum=policy_document_checksum(document),
            note=note,
            is_active=activate,
        )
        version.strategies.set(strategies)
        version.source_strategies.set(source_strategies)
        if activate:
            # Runs cache the compiled active policy; drop it once the new version is visible.
            transaction.on_commit(runtime_policy_cache_clear)
        audit_event.send(
            sender=PolicyVersion,
            actor=author,
            actor_kind=author_kind,
            action="policy_version.create",
            target=version.label,
            details={
                "strategies": sorted(strategy.pk for strategy in strategies),
                "parent": active.number if active else None,
            },
        )
    return version


def policy_import_preview(*, text: str) -> PolicyImportPreview:
    """Parse, validate and compare ``text`` with the active version without writing anything."""
    document = policy_document_parse(text)
    existing = _strategies_for(document)
    active = policy_version_active()
    to_create = [entry for entry in document.entries if entry.id is None]
    to_update = [
        entry
        for entry in document.entries
        if entry.id is not None and _changed_fields(existing[entry.id], entry)
    ]
    number = (PolicyVersion.objects.aggregate(highest=Max("number"))["highest"] or 0) + 1
    rendered = policy_document_render(
        number=number, parent=active.number if active else None, strategies=document.entries
    )
    diff = _documents_diff(
        old_text=active.document if active else "",
        new_text=rendered,
        old_label=active.label if active else "(none)",
        new_label=f"v{number}",
    )
    return PolicyImportPreview(
        document=document,
        active=active,
        rendered=rendered,
        diff=diff,
        to_create=to_create,
        to_update=to_update,
    )


def policy_import(*, text: str, author: Any = None) -> PolicyVersion:
    """Make ``text`` the active policy: update edited strategies, create new ones, snapshot.

    Strategies keep their status and confidence when edited: the document describes rules,
    not how well they perform. A document with the active version's content is a no-op.
    """
    document = policy_document_parse(text)
    with transaction.atomic():
        active = PolicyVersion.objects.select_for_update().filter(is_active=True).first()
        existing = _strategies_for(document, lock=True)
        if active is not None and _same_content_as(document, active):
            return active
        listed: list[Strategy] = []
        touched: list[Strategy] = []
        created: list[int] = []
        updated: dict[int, list[str]] = {}
        for entry in document.entries:
            if entry.id is None:
                strategy = _strategy_create_from(entry)
                created.append(strategy.pk)
                touched.append(strategy)
            else:
                strategy = existing[entry.id]
                changed = _strategy_update_from(strategy, entry)
                if changed:
                    updated[strategy.pk] = changed
                    touched.append(strategy)
            listed.append(strategy)
        version = policy_version_create(
            strategies=listed,
            author=author,
            author_kind=PolicyVersion.AuthorKind.IMPORT,
            note="import",
            source_strategies=touched,
        )
        audit_event.send(
            sender=PolicyVersion,
            actor=author,
            actor_kind=PolicyVersion.AuthorKind.IMPORT,
            action="policy.import",
            target=version.label,
            details={"created": created, "updated": {str(k): v for k, v in updated.items()}},
        )
    return version


def policy_diff(*, old: PolicyVersion, new: PolicyVersion) -> PolicyDiff:
    """Structured (by strategy id) and unified text diff between two versions."""
    return _documents_diff(
        old_text=old.document, new_text=new.document, old_label=old.label, new_label=new.label
    )


def _documents_diff(*, old_text: str, new_text: str, old_label: str, new_label: str) -> PolicyDiff:
    old_entries = policy_document_parse(old_text).entries if old_text else []
    new_entries = policy_document_parse(new_text).entries
    old_by_id = {entry.id: entry for entry in old_entries if entry.id is not None}
    new_by_id = {entry.id: entry for entry in new_entries if entry.id is not None}
    added = [entry for entry in new_entries if entry.id is None or entry.id not in old_by_id]
    removed = [entry for entry in old_entries if entry.id not in new_by_id]
    changed = [
        change
        for entry_id in sorted(set(old_by_id) & set(new_by_id))
        for change in _entry_changes(old_by_id[entry_id], new_by_id[entry_id])
    ]
    text = "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=old_label,
            tofile=new_label,
        )
    )
    return PolicyDiff(
        old_label=old_label,
        new_label=new_label,
        added=sorted(added, key=_entry_order),
        removed=sorted(removed, key=_entry_order),
        changed=changed,
        text=text,
    )


def _entry_changes(old: PolicyEntry, new: PolicyEntry) -> list[PolicyChange]:
    assert old.id is not None
    changes = [
        PolicyChange(old.id, name, getattr(old, name), getattr(new, name))
        for name in ("kind", "tool", "intent", "error_type", "root_cause", "strategy_update")
        if getattr(old, name) != getattr(new, name)
    ]
    return changes + _value_changes(old.id, "branch", old.branch, new.branch)


def _value_changes(entry_id: int, path: str, old: Any, new: Any) -> list[PolicyChange]:
    if isinstance(old, dict) and isinstance(new, dict):
        return [
            change
            for key in [*old, *(key for key in new if key not in old)]
            for change in _value_changes(entry_id, f"{path}.{key}", old.get(key), new.get(key))
        ]
    return [] if old == new else [PolicyChange(entry_id, path, old, new)]


def _same_content_as(document: PolicyDocument, version: PolicyVersion) -> bool:
    # Compare as the version would have rendered it: the file's own version/parent header
    # may come from an older export and must not make an unchanged tree look different.
    rendered = policy_document_render(
        number=version.number,
        parent=version.parent.number if version.parent else None,
        strategies=document.entries,
    )
    return policy_document_checksum(rendered) == version.checksum


def _strategies_for(document: PolicyDocument, *, lock: bool = False) -> dict[int, Strategy]:
    ids = [entry.id for entry in document.entries if entry.id is not None]
    queryset = Strategy.objects.filter(pk__in=ids)
    if lock:
        queryset = queryset.select_for_update()
    found = {strategy.pk: strategy for strategy in queryset}
    missing = [
        f"{entry.path}.id: strategy {entry.id} does not exist"
        for entry in document.entries
        if entry.id is not None and entry.id not in found
    ]
    if missing:
        raise PolicyDocumentError(missing)
    return found


def _changed_fields(strategy: Strategy, entry: PolicyEntry) -> list[str]:
    wanted = {
        "kind": entry.kind,
        "tool_name": entry.tool,
        "intent": entry.intent,
        "error_type": entry.error_type,
        "root_cause": entry.root_cause,
        "strategy_update": entry.strategy_update,
        "branch": entry.branch,
    }
    return [name for name, value in wanted.items() if getattr(strategy, name) != value]


def _strategy_update_from(strategy: Strategy, entry: PolicyEntry) -> list[str]:
    changed = _changed_fields(strategy, entry)
    if not changed:
        return []
    strategy.kind = entry.kind
    strategy.tool_name = entry.tool
    strategy.intent = entry.intent
    strategy.error_type = entry.error_type
    strategy.root_cause = entry.root_cause
    strategy.strategy_update = entry.strategy_update
    strategy.branch = entry.branch
    update_fields = [*changed, "updated_at"]
    if {"kind", "branch"} & set(changed):
        strategy.signature = branch_signature(entry.kind, entry.branch)
        update_fields.append("signature")
    if {"tool_name", "intent"} & set(changed):
        strategy.policy, _ = Policy.objects.get_or_create(intent=entry.intent, tool_name=entry.tool)
        update_fields.append("policy")
    strategy.save(update_fields=update_fields)
    return changed


def _strategy_create_from(entry: PolicyEntry) -> Strategy:
    policy, _ = Policy.objects.get_or_create(intent=entry.intent, tool_name=entry.tool)
    return Strategy.objects.create(
        policy=policy,
        kind=entry.kind,
        tool_name=entry.tool,
        intent=entry.intent,
        error_type=entry.error_type,
        root_cause=entry.root_cause,
        strategy_update=entry.strategy_update,
        branch=entry.branch,
        signature=branch_signature(entry.kind, entry.branch),
        confidence=0.7,
        status=Strategy.Status.ACTIVE,
        origin="import",
    )


# --- views of a document for people -------------------------------------------------------


@dataclass(frozen=True)
class PolicyBranchList:
    """One kind's list inside a scope: pre-conditions, validation rules, ..."""

    name: str
    kind: str
    entries: list[PolicyEntry]


@dataclass(frozen=True)
class PolicyScope:
    """A tool/intent scope of a document with its five branch lists, in document order."""

    tool: str
    intent: str
    lists: list[PolicyBranchList]

    @property
    def size(self) -> int:
        return sum(len(branch_list.entries) for branch_list in self.lists)


def policy_document_tree(document: PolicyDocument) -> list[PolicyScope]:
    """The document as a tree: scope -> kind list -> entries, in the order the YAML has."""
    scopes: dict[tuple[str, str], dict[str, list[PolicyEntry]]] = {}
    for entry in document.entries:
        lists = scopes.setdefault((entry.tool, entry.intent), {name: [] for name in LIST_KINDS})
        lists[KIND_LISTS[entry.kind]].append(entry)
    return [
        PolicyScope(
            tool=tool,
            intent=intent,
            lists=[
                PolicyBranchList(
                    name=name, kind=LIST_KINDS[name], entries=sorted(items, key=_entry_order)
                )
                for name, items in lists.items()
            ],
        )
        for (tool, intent), lists in sorted(scopes.items())
    ]


@dataclass(frozen=True)
class DiffRow:
    """One row of a side-by-side diff; a side is None where that document has no line.

    ``tag`` is difflib's opcode (equal, replace, delete, insert) or ``skip`` for a fold of
    unchanged lines, whose count is in ``skipped``.
    """

    tag: str
    old_number: int | None = None
    old_line: str | None = None
    new_number: int | None = None
    new_line: str | None = None
    skipped: int = 0


def policy_document_side_by_side(
    *, old_text: str, new_text: str, context: int = 3
) -> list[DiffRow]:
    """Two documents as aligned rows; unchanged runs longer than 2 x ``context`` fold."""
    old_lines, new_lines = old_text.splitlines(), new_text.splitlines()
    rows: list[DiffRow] = []
    matcher = difflib.SequenceMatcher(a=old_lines, b=new_lines, autojunk=False)
    opcodes = matcher.get_opcodes()
    for index, (tag, i1, i2, j1, j2) in enumerate(opcodes):
        if tag == "equal":
            keep_head = 0 if index == 0 else context
            keep_tail = 0 if index == len(opcodes) - 1 else context
            if len(opcodes) == 1 or i2 - i1 <= keep_head + keep_tail + 1:
                spans = [(i1, i2, j1)]
                skipped = 0
            else:
                spans = [(i1, i1 + keep_head, j1), (i2 - keep_tail, i2, j2 - keep_tail)]
                skipped = i2 - i1 - keep_head - keep_tail
            for number, (start, end, other) in enumerate(spans):
                if number == 1:
                    rows.append(DiffRow(tag="skip", skipped=skipped))
                rows += [
                    DiffRow("equal", i + 1, old_lines[i], other + (i - start) + 1, old_lines[i])
                    for i in range(start, end)
                ]
            continue
        # replace, delete, insert: pair the two sides line by line, padding the shorter.
        for offset in range(max(i2 - i1, j2 - j1)):
            i, j = i1 + offset, j1 + offset
            rows.append(
                DiffRow(
                    tag,
                    i + 1 if i < i2 else None,
                    old_lines[i] if i < i2 else None,
                    j + 1 if j < j2 else None,
                    new_lines[j] if j < j2 else None,
                )
            )
    return rows
