"""The Celery app: reads CELERY_* settings and discovers each app's tasks."""

from typing import Any
from urllib.parse import urlsplit

from celery import Celery

from config.shape import settings_select

settings_select()

app = Celery("agent_ops")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def use_restart_safe_redis_transport(sender: Celery, **kwargs: Any) -> None:
    """A redis:// broker goes through config.broker's transport, which survives a lost broker.

    rediss:// keeps kombu's own transport, whose alias also sets the TLS defaults.
    """
    conf = sender.conf
    if not conf.broker_transport and urlsplit(str(conf.broker_url or "")).scheme == "redis":
        conf.broker_transport = "config.broker:RedisTransport"
