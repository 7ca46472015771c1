"""Forms of the policy pages."""

from __future__ import annotations

from django import forms

from policies.models import Experiment


class ExperimentForm(forms.ModelForm):
    """A new A/B experiment: what it tests, how much traffic, at what size to read it."""

    class Meta:
        model = Experiment
        fields = ["name", "hypothesis", "traffic_percent", "planned_runs_per_arm"]
        labels = {
            "traffic_percent": "Share of new sessions (%)",
            "planned_runs_per_arm": "Planned runs per arm",
        }
        widgets = {
            "hypothesis": forms.Textarea(
                attrs={
                    "rows": 3,
                    "placeholder": "The learned strategies raise the success rate and cut "
                    "retries for order lookups.",
                }
            ),
        }
