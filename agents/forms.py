from django import forms

from agents.query_validation import (
    CUSTOMER_ID_MESSAGE,
    CUSTOMER_ID_PATTERN,
    validate_query_length,
)


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
