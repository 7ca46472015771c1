"""The reviewer's decision, validated like any other posted form."""

from __future__ import annotations

from typing import Any

import yaml
from django import forms
from django.contrib.auth import get_user_model

from config.safe_yaml import PlainSafeDumper, yaml_load_plain
from policies.branches import branch_errors
from policies.models import Strategy
from reviews.selectors import reviewers
from reviews.services import ROOT_CAUSE_MAX, STRATEGY_UPDATE_MAX, StrategyEdit

NOTE_MAX_LENGTH = 500


class ReviewDecisionForm(forms.Form):
    # CharField refuses NUL characters, which PostgreSQL cannot store in a text column.
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    note = forms.CharField(required=False, max_length=NOTE_MAX_LENGTH)

    def clean(self) -> dict:
        cleaned = super().clean() or {}
        if cleaned.get("decision") == "reject" and not cleaned.get("note"):
            raise forms.ValidationError("Say why you reject it: the note is kept in the audit log.")
        return cleaned


class ReviewNoteForm(forms.Form):
    """An optional note on an approval (kept on the item and in the audit log)."""

    note = forms.CharField(required=False, max_length=NOTE_MAX_LENGTH)


class ReviewReasonForm(forms.Form):
    """A rejection or a request for evidence: the reason is required."""

    note = forms.CharField(
        max_length=NOTE_MAX_LENGTH,
        error_messages={
            "required": "Say why: the reason is kept on the item and in the audit log."
        },
    )

    def clean_note(self) -> str:
        note = self.cleaned_data["note"].strip()
        if not note:
            raise forms.ValidationError(
                "Say why: the reason is kept on the item and in the audit log."
            )
        return note


BRANCH_MAX_LENGTH = 5000


class StrategyEditForm(forms.Form):
    """A reviewer's edit of a proposed strategy: its words and its rule (YAML or JSON).

    The rule is checked like any branch (``policies.branches.branch_errors``); the service
    then replays it before anything is saved.
    """

    root_cause = forms.CharField(max_length=ROOT_CAUSE_MAX)
    strategy_update = forms.CharField(max_length=STRATEGY_UPDATE_MAX, label="Update")
    branch = forms.CharField(
        max_length=BRANCH_MAX_LENGTH,
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}),
        help_text="The rule as YAML (JSON works too). Its kind stays as proposed.",
    )
    note = forms.CharField(required=False, max_length=NOTE_MAX_LENGTH)

    def __init__(self, *args: Any, kind: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kind = kind

    @classmethod
    def for_strategy(cls, strategy: Strategy) -> StrategyEditForm:
        return cls(
            kind=strategy.kind,
            initial={
                "root_cause": strategy.root_cause,
                "strategy_update": strategy.strategy_update,
                "branch": yaml.dump(
                    strategy.branch, Dumper=PlainSafeDumper, sort_keys=False, allow_unicode=True
                ),
            },
        )

    def clean_branch(self) -> dict[str, Any]:
        try:
            branch = yaml_load_plain(self.cleaned_data["branch"])
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or (str(exc) if mark is None else "")
            detail = f": {problem}" if problem else ""
            raise forms.ValidationError(f"Not valid YAML{where}{detail}.") from exc
        errors = branch_errors(self.kind, branch)
        if errors:
            raise forms.ValidationError(errors)
        return dict(branch)

    def edit(self) -> StrategyEdit:
        data = self.cleaned_data
        return StrategyEdit(
            root_cause=data["root_cause"].strip(),
            strategy_update=data["strategy_update"].strip(),
            branch=data["branch"],
        )


class ReviewAssignForm(forms.Form):
    """Assign an item to a reviewer; empty clears the assignment."""

    assignee = forms.ModelChoiceField(
        queryset=get_user_model().objects.none(), required=False, empty_label="nobody"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["assignee"].queryset = reviewers()  # type: ignore[attr-defined]
