"""Ops also run A/B experiments of the learning loop (policies.run_experiments).

Like 0004 the table is frozen here; ``reviews.roles`` stays the one place that hands
permissions out, and ``roles_sync`` re-asserts it on existing installations.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

OPS_ADDED = [("policies", "run_experiments")]


def grant_ops(apps, schema_editor):
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    added = [
        Permission.objects.get(content_type__app_label=app_label, codename=codename)
        for app_label, codename in OPS_ADDED
    ]
    ops, _ = Group.objects.get_or_create(name="ops")
    ops.permissions.add(*added)
    admin, _ = Group.objects.get_or_create(name="admin")
    admin.permissions.set(Permission.objects.all())


class Migration(migrations.Migration):
    dependencies = [
        ("reviews", "0008_review_assignment"),
        ("policies", "0004_experiments"),
    ]

    operations = [migrations.RunPython(grant_ops, migrations.RunPython.noop)]
