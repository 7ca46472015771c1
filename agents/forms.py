import json
from typing import Any

from django import forms
from jsonschema import Draft202012Validator, SchemaError

from agents.models import Agent, Tool
from agents.query_validation import (
    CUSTOMER_ID_MESSAGE,
    CUSTOMER_ID_PATTERN,
    validate_query_length,
)
from agents.tools.endpoints import endpoint_template_problem


class ChatForm(forms.Form):
    # No max_length: it would render a `maxlength` attribute, and browsers silently cut a
    # pasted question at it. The validator refuses a long question with a message instead,
    # and the page keeps the text so it can be shortened.
    query = forms.CharField(
        strip=True,
        validators=[validate_query_length],
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "e.g. Where is my order #W1234567?", "autofocus": True}
        ),
    )
    customer_id = forms.RegexField(
        regex=CUSTOMER_ID_PATTERN,
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "customer id (optional)"}),
        error_messages={"invalid": CUSTOMER_ID_MESSAGE},
    )


class ToolEditForm(forms.Form):
    """An admin's edit of one tool. The JSON Schema is edited as text: the text must parse,
    be a valid Draft 2020-12 schema (what the executor validates arguments with) and
    describe an object; the endpoint rules are the model's (``Tool.clean``), applied by
    ``tool_update``. A refused edit re-renders the submitted text unchanged."""

    description = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}))
    endpoint_template = forms.CharField(
        required=False,
        max_length=500,
        help_text=(
            "e.g. {sandbox}/orders/{order_id}. Scheme, host and port are fixed; "
            "placeholders only in the path or query."
        ),
    )
    method = forms.ChoiceField(choices=[(method, method) for method in Tool.Method.values])
    timeout_seconds = forms.FloatField(help_text="Seconds, more than 0 and at most 60.")
    params_schema = forms.CharField(
        label="Arguments (JSON Schema)",
        strip=False,
        widget=forms.Textarea(attrs={"rows": 14, "spellcheck": "false", "class": "mono"}),
    )
    allowed_agents = forms.ModelMultipleChoiceField(
        queryset=Agent.objects.order_by("slug"),
        required=False,
        widget=forms.CheckboxSelectMultiple(attrs={"class": "checks"}),
        help_text="Agents whose runs may call this tool.",
    )

    def __init__(self, *args: Any, tool: Tool, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tool = tool

    @classmethod
    def initial_for(cls, tool: Tool) -> dict[str, Any]:
        return {
            "description": tool.description,
            "endpoint_template": tool.endpoint_template,
            "method": tool.method,
            "timeout_seconds": tool.timeout_seconds,
            "params_schema": json.dumps(tool.params_schema, indent=2, sort_keys=True),
            "allowed_agents": list(tool.allowed_agents.all()),
        }

    def clean_endpoint_template(self) -> str:
        # Checked here as well as in Tool.clean() so that a bad endpoint is reported
        # together with a bad schema, not one submit later.
        template = self.cleaned_data["endpoint_template"]
        if self.tool.kind == Tool.Kind.HTTP:
            problem = endpoint_template_problem(template)
            if problem:
                raise forms.ValidationError(problem)
        return template

    def clean_params_schema(self) -> dict[str, Any]:
        text = self.cleaned_data["params_schema"]
        try:
            schema = json.loads(text)
        except json.JSONDecodeError as exc:
            raise forms.ValidationError(
                f"Not valid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}."
            ) from exc
        if not isinstance(schema, dict):
            raise forms.ValidationError("The schema must be a JSON object.")
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as exc:
            where = "/".join(str(part) for part in exc.path) or "(root)"
            raise forms.ValidationError(
                f"Not a valid JSON Schema at {where}: {exc.message}"
            ) from exc
        if schema.get("type") != "object":
            raise forms.ValidationError('The arguments schema must have "type": "object".')
        return schema


class ToolImportForm(forms.Form):
    """Upload a tool document (preview), then confirm: the confirm step posts the same
    document back as text, and it is parsed and checked again before anything is saved."""

    file = forms.FileField(required=False, help_text="OpenAPI 3 (JSON or YAML) or a function list.")
    document = forms.CharField(required=False, widget=forms.HiddenInput)
    base_url = forms.URLField(
        required=False,
        assume_scheme="https",
        help_text="Server URL; overrides the document's servers. Must be on the allow-list.",
    )
    origin = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)

    def clean(self) -> dict[str, Any]:
        from agents.tools.tool_import import MAX_DOCUMENT_BYTES

        cleaned = super().clean() or {}
        upload = cleaned.get("file")
        if upload is not None:
            if upload.size > MAX_DOCUMENT_BYTES:
                raise forms.ValidationError(f"The file is larger than {MAX_DOCUMENT_BYTES} bytes.")
            try:
                cleaned["document"] = upload.read().decode()
            except UnicodeDecodeError as exc:
                raise forms.ValidationError("The file is not UTF-8 text.") from exc
            cleaned["origin"] = upload.name[:200]
        if not cleaned.get("document"):
            raise forms.ValidationError("Choose a file to import.")
        return cleaned
