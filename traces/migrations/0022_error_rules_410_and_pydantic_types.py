"""Rules an installation seeded earlier lacks.

- A 410 (gone) is RESOURCE_NOT_FOUND. Before, it was "any other 4xx", INVALID_PARAMETER,
  and Reflexion tried to repair a call that no argument fixes.
- The "4xx naming a type mismatch" rule also reads pydantic v2's codes and messages
  (``int_parsing``, "Input should be a valid integer"): the same API change was
  TYPE_MISMATCH from one framework and INVALID_PARAMETER from another, two signatures that
  were learned, and held, apart.

The type rule's pattern is changed only while it is as seeded (an admin's edit is kept);
the 410 rule is added once, beside the 404 (ahead of the rules that read a 4xx's wording). A fresh database already has both (0002 seeds the current
defaults); an empty table is left for ``errorrules_seed_defaults``.
"""

from django.db import migrations, models

import traces.patterns

# Frozen copies (traces.classifier): a migration must not change meaning with the code.
TYPE_SEEDED = r"type_mismatch|expected_type|must be an? (integer|number|boolean)"
TYPE_NOW = (
    r"type_mismatch|expected_type|must be an? (integer|number|boolean)"
    r"|\b(int|float|bool|decimal)_(parsing|type)\b|should be a valid (integer|number|boolean)"
)
GONE = {
    "position": 58,
    "name": "410 gone",
    "source": "http",
    "status_min": 410,
    "status_max": 410,
    "exception_class": "",
    "body_pattern": "",
    "error_type": "RESOURCE_NOT_FOUND",
}


def forwards(apps, schema_editor):
    ErrorRule = apps.get_model("traces", "ErrorRule")
    if not ErrorRule.objects.exists():
        return
    ErrorRule.objects.filter(source="http", body_pattern=TYPE_SEEDED).update(body_pattern=TYPE_NOW)
    if not ErrorRule.objects.filter(source="http", status_min=410, status_max=410).exists():
        ErrorRule.objects.create(**GONE)


def backwards(apps, schema_editor):
    ErrorRule = apps.get_model("traces", "ErrorRule")
    ErrorRule.objects.filter(**GONE).delete()
    ErrorRule.objects.filter(source="http", body_pattern=TYPE_NOW).update(body_pattern=TYPE_SEEDED)


class Migration(migrations.Migration):
    dependencies = [
        ("traces", "0021_error_rules_bad_response_3xx"),
    ]

    operations = [
        migrations.RunPython(forwards, backwards),
        # New patterns must run on RE2 (traces/patterns.py); rows saved before keep theirs.
        migrations.AlterField(
            model_name="errorrule",
            name="body_pattern",
            field=models.CharField(
                blank=True,
                help_text="Case-insensitive regex (RE2 syntax) searched in the body's first 64 KiB.",
                max_length=300,
                validators=[traces.patterns.validate_body_pattern],
            ),
        ),
    ]
