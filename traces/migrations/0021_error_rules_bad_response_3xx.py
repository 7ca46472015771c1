"""Rules for failures that an installation seeded earlier classified wrongly or not at all.

- A 2xx that is no result (``agents.tools.executor.response_body_problem``: an error
  envelope, an HTML page, broken JSON): the executor now fails such a call with
  ``BAD_RESPONSE``; a body naming a missing resource is RESOURCE_NOT_FOUND, any other an
  upstream fault (INTERNAL_SERVER_ERROR). Before, the call counted as a success.
- A 3xx that reaches the classifier (no usable Location, a 304): INVALID_ENDPOINT. Before,
  no rule matched and it was UNKNOWN, which the learning loop does not learn from.
- The 401/403 and 404 rules move ahead of the 4xx rules that read the body: "the
  Authorization header is required" on a 401 was MISSING_REQUIRED_FIELD.

Existing rows are moved only while they are as seeded (an admin's edit is kept); new rows
are added once. A fresh database already has all of this (0002 seeds the current
defaults); an empty table is left for ``errorrules_seed_defaults``.
"""

from django.db import migrations

# Frozen copies of the rules as DEFAULT_ERROR_RULES has them (traces.classifier): a
# migration must not change meaning when the code's defaults change later.
NOT_FOUND = (
    r"not[ _-]?found|no such|does not exist|doesn't exist"
    r"|unknown (order|sku|id|customer|product|item)"
)
ADDED = [
    {
        "position": 55,
        "name": "2xx whose body says the resource does not exist",
        "source": "executor",
        "status_min": None,
        "status_max": None,
        "exception_class": "BAD_RESPONSE",
        "body_pattern": NOT_FOUND,
        "error_type": "RESOURCE_NOT_FOUND",
    },
    {
        "position": 56,
        "name": "2xx whose body is an error, an HTML page or broken JSON",
        "source": "executor",
        "status_min": None,
        "status_max": None,
        "exception_class": "BAD_RESPONSE",
        "body_pattern": "",
        "error_type": "INTERNAL_SERVER_ERROR",
    },
    {
        "position": 69,
        "name": "Unexpected 3xx",
        "source": "http",
        "status_min": 300,
        "status_max": 399,
        "exception_class": "",
        "body_pattern": "",
        "error_type": "INVALID_ENDPOINT",
    },
]
# (status_min, status_max, error_type, seeded position, new position)
MOVED = [(401, 403, "UNAUTHORIZED", 62, 57), (404, 404, "RESOURCE_NOT_FOUND", 63, 58)]


def _seeded(ErrorRule, status_min, status_max, error_type, position):
    return ErrorRule.objects.filter(
        source="http",
        status_min=status_min,
        status_max=status_max,
        error_type=error_type,
        position=position,
        exception_class="",
        body_pattern="",
    )


def forwards(apps, schema_editor):
    ErrorRule = apps.get_model("traces", "ErrorRule")
    if not ErrorRule.objects.exists():
        return
    for rule in ADDED:
        match = {k: rule[k] for k in ("source", "exception_class", "status_min", "status_max")}
        if not ErrorRule.objects.filter(**match, error_type=rule["error_type"]).exists():
            ErrorRule.objects.create(**rule)
    for low, high, error_type, old, new in MOVED:
        _seeded(ErrorRule, low, high, error_type, old).update(position=new)


def backwards(apps, schema_editor):
    ErrorRule = apps.get_model("traces", "ErrorRule")
    for rule in ADDED:
        ErrorRule.objects.filter(**rule).delete()
    for low, high, error_type, old, new in MOVED:
        _seeded(ErrorRule, low, high, error_type, new).update(position=old)


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0020_trace_owner_in_flight"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
