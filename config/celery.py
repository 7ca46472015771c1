"""The Celery app: reads CELERY_* settings and discovers each app's tasks."""

from celery import Celery

from config.shape import settings_select

settings_select()

app = Celery("agent_ops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
