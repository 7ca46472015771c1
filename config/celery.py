"""The Celery app: reads CELERY_* settings and discovers each app's tasks."""

import os
from typing import Any
from urllib.parse import urlsplit

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

app = Celery("agent_ops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def use_restart_safe_redis_transport(sender: Celery, **kwargs: Any) -> None:
    """A redis:// broker goes through config.broker's transport, which survives a lost broker.

    rediss:// keeps kombu's own transport: only its alias turns on TLS.
    """
    conf = sender.conf
    if not conf.broker_transport and urlsplit(conf.broker_url).scheme == "redis":
        conf.broker_transport = "config.broker:RedisTransport"
