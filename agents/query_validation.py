"""What a question must be, checked the same way by the API, the chat page and `manage.py ask`."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxLengthValidator, RegexValidator


def query_max_chars() -> int:
    return settings.AGENT_QUERY_MAX_CHARS


# The limit is read when a value is checked, so the setting (and override_settings) decides,
# and drf-spectacular documents it as the field's maxLength.
validate_query_length = MaxLengthValidator(
    query_max_chars,
    message=(
        "The question is %(show_value)d characters long; the limit is %(limit_value)d. "
        "Shorten it and ask again."
    ),
)

# Any character that str.strip() keeps, spelled out: `\s` differs between Python, ECMA and
# Rust regexes, and the OpenAPI schema publishes this pattern to clients of all three.
NON_BLANK_PATTERN = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
validate_query_not_blank = RegexValidator(NON_BLANK_PATTERN, message="The question is empty.")


def validate_query_text(value: str) -> None:
    """Refuse what no database column can store: a NUL, or a lone surrogate (the bytes of a
    terminal that is not UTF-8, as Python hands them to `manage.py ask`)."""
    if "\x00" in value:
        raise ValidationError("The question contains a NUL character.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            "The question is not valid UTF-8 text; check the terminal's encoding."
        ) from exc


# The column holds 64 characters; the chat page, the API and the CLI accept the same ids.
CUSTOMER_ID_PATTERN = r"^[A-Za-z0-9_-]{0,64}$"
CUSTOMER_ID_MESSAGE = "Letters, digits, - and _ only (max 64)."
validate_customer_id = RegexValidator(CUSTOMER_ID_PATTERN, message=CUSTOMER_ID_MESSAGE)
