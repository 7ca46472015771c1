"""Create the support, ops and admin groups with their permissions.

The table is frozen here on purpose: a later change to ``reviews.roles`` reaches existing
installations through ``manage.py roles_sync`` (demo_seed runs it), not by editing history.
"""

from django.contrib.auth.management import create_permissions
from django.db import migrations

ROLE_PERMISSIONS = {
    "support": [("agents", "start_run")],
    "ops": [
        ("agents", "start_run"),
        ("traces", "view_all_traces"),
        ("reviews", "review_strategies"),
        ("sandbox", "inject_faults"),
    ],
}


def create_roles(apps, schema_editor):
    # Permissions are normally created after the last migration (post_migrate); the
    # groups need them now, on a fresh database too.
    for app_config in apps.get_app_configs():
        app_config.models_module = True
        create_permissions(app_config, apps=apps, verbosity=0)
        app_config.models_module = None
    Group = apps.get_model("auth", "Group")
    Permission = apps.get_model("auth", "Permission")
    for role, names in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        group.permissions.set(
            [
                Permission.objects.get(content_type__app_label=app_label, codename=codename)
                for app_label, codename in names
            ]
        )
    admin, _ = Group.objects.get_or_create(name="admin")
    admin.permissions.set(Permission.objects.all())


class Migration(migrations.Migration):
    dependencies = [
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("agents", "0005_agent_start_run_permission"),
        ("traces", "0005_trace_view_all_traces_permission"),
        ("policies", "0001_initial"),
        ("sandbox", "0002_faultrule_inject_faults_permission"),
        ("reviews", "0002_reviewitem_review_strategies_permission"),
    ]

    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
