from django import forms


class ChatForm(forms.Form):
    query = forms.CharField(
        max_length=4000,
        strip=True,
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "e.g. Where is my order #W1234567?", "autofocus": True}
        ),
    )
    customer_id = forms.RegexField(
        regex=r"^[A-Za-z0-9_-]{0,64}$",
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "customer id (optional)"}),
        error_messages={"invalid": "Letters, digits, - and _ only (max 64)."},
    )
