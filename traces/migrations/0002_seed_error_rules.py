from django.db import migrations


def seed(apps, schema_editor):
    from traces.classifier import DEFAULT_ERROR_RULES

    ErrorRule = apps.get_model("traces", "ErrorRule")
    if not ErrorRule.objects.exists():
        ErrorRule.objects.bulk_create([ErrorRule(**row) for row in DEFAULT_ERROR_RULES])


def unseed(apps, schema_editor):
    apps.get_model("traces", "ErrorRule").objects.all().delete()


class Migration(migrations.Migration):
    dependencies = [("traces", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
