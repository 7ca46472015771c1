"""A user's runs in flight (queued or running), counted before each new run
(``AGENT_RUNS_IN_FLIGHT_PER_USER``): a partial index, as small as the runs in flight."""

from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0008_customerfact"),
        ("traces", "0019_redundant_indexes"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddIndex(
            model_name="trace",
            index=models.Index(
                condition=models.Q(("status__in", ["queued", "running"])),
                fields=["created_by"],
                name="trace_owner_in_flight",
            ),
        ),
    ]
