"""Support and ops see and delete the customer memory (agents.CustomerFact).

Like 0004 the grant is frozen here; ``reviews.roles`` stays the one place that hands
permissions out, and ``roles_sync`` re-asserts it on existing installations.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

MEMORY = [("agents", "view_customerfact"), ("agents", "delete_customerfact")]


def grant_memory(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    added = [
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
        for app_label, codename in MEMORY
    ]
    for role in ("support", "ops"):
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.add(*added)
    admin, _ = Group.objects.get_or_create(name="admin")
    admin.permissions.set(Permission.objects.all())


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0009_ops_run_experiments"),
        ("agents", "0008_customerfact"),
    ]

    operations = [migrations.RunPython(grant_memory, migrations.RunPython.noop)]
