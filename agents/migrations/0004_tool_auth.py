from django.db import migrations, models

RULE = {
    "position": 54,
    "name": "Tool credential not configured",
    "source": "executor",
    "exception_class": "CREDENTIAL_MISSING",
    "error_type": "UNAUTHORIZED",
}


def add_rule(apps, schema_editor):
    # The classifier's table is data: a database seeded before this code gets the new row
    # for the executor code this migration's feature introduces.
    ErrorRule = apps.get_model("traces", "ErrorRule")
    if ErrorRule.objects.exists() and not ErrorRule.objects.filter(
        exception_class=RULE["exception_class"]
    ).exists():
        ErrorRule.objects.create(**RULE)


def remove_rule(apps, schema_editor):
    apps.get_model("traces", "ErrorRule").objects.filter(
        exception_class=RULE["exception_class"]
    ).delete()


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0003_knowledgearticle"),
        ("traces", "0002_seed_error_rules"),
    ]

    operations = [
        migrations.AddField(
            model_name="tool",
            name="auth",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text=(
                    'Credential by environment-variable name, e.g. {"type": "bearer", "env": '
                    '"SHOP_API_KEY"}, {"type": "header", "name": "X-Api-Key", "env": '
                    '"SHOP_API_KEY"} or {"type": "query", "name": "api_key", "env": '
                    '"SHOP_API_KEY"}. The secret itself stays in the worker\'s environment.'
                ),
            ),
        ),
        migrations.AlterField(
            model_name="tool",
            name="endpoint_template",
            field=models.CharField(
                blank=True,
                help_text=(
                    "e.g. {sandbox}/orders/{order_id}; {sandbox} is SANDBOX_BASE_URL. Scheme, "
                    "host and port must be fixed; placeholders only in the path or query."
                ),
                max_length=500,
            ),
        ),
        migrations.RunPython(add_rule, remove_rule),
    ]
