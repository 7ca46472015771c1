"""The reviewer's decision, validated like any other posted form."""

from __future__ import annotations

from django import forms

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
