"""Production shape: PostgreSQL, Redis broker and channel layer, HTTPS; secrets have no default.

Selected when DATABASE_URL and REDIS_URL are both set (config/shape.py). Every security
setting is on by default, so `manage.py check --deploy` is clean; each one can be relaxed by
an env var, e.g. for plain HTTP on loopback (DJANGO_SECURE_SSL_REDIRECT=false,
DJANGO_SECURE_COOKIES=false).
"""

import os

from config.shape import secret_key_required

from .base import *  # noqa: F403
from .base import BASE_DIR, database_named, env

DEBUG = False
SECRET_KEY = secret_key_required(os.environ)
DATABASES = {"default": database_named(env.db("DATABASE_URL"))}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=60)
if DATABASES["default"]["CONN_MAX_AGE"] == 0 and env.int("DB_POOL_MAX_SIZE", default=0) > 0:
    # The ASGI servers (config.shape.asgi_settings_select): a bounded pool per process.
    DATABASES["default"]["OPTIONS"]["pool"] = {
        "min_size": 1,
        "max_size": env.int("DB_POOL_MAX_SIZE"),
        "timeout": env.float("DB_POOL_TIMEOUT", default=10.0),
        # While PostgreSQL is away the pool retries with a doubling delay (1, 2, 4, 8 ...
        # s), so after a 15 s outage it went on failing for 13.6 s more
        # (bench/pg_restart_drill.py). Giving an attempt up after this long restarts the
        # next one from a 1 s delay, on the next request.
        "reconnect_timeout": env.float("DB_POOL_RECONNECT_TIMEOUT", default=5.0),
    }
REDIS_URL = env("REDIS_URL")
CELERY_BROKER_URL = REDIS_URL
AGENT_EXECUTOR = "celery"
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {"hosts": [REDIS_URL]},
    }
}

# --- HTTPS -----------------------------------------------------------------------
# Served behind a TLS-terminating proxy that sets X-Forwarded-Proto.
if env.bool("DJANGO_SECURE_PROXY_SSL_HEADER", default=True):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
# The runtime reaches the sandbox on this server over plain HTTP (SANDBOX_BASE_URL): a
# redirect to https would send its tool calls to a port that speaks no TLS.
# A load balancer probes the health check over plain HTTP too.
SECURE_REDIRECT_EXEMPT = [r"^sandbox/api/", r"^healthz$"]
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=60 * 60 * 24 * 365)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("DJANGO_SECURE_HSTS_PRELOAD", default=True)
SESSION_COOKIE_SECURE = env.bool("DJANGO_SECURE_COOKIES", default=True)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

# --- Static files: collected by bin/serve, served by WhiteNoise with hashed names ----
STATIC_ROOT = env("DJANGO_STATIC_ROOT", default=str(BASE_DIR / "var" / "staticfiles"))
WHITENOISE_USE_FINDERS = False
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}
