"""Test settings: the real local PostgreSQL and Redis, never skipped."""

from .base import *  # noqa: F403
from .base import env

# A fixed key keeps test runs reproducible; no deployment shape ever loads this module.
SECRET_KEY = env("DJANGO_SECRET_KEY", default="test-only-secret-key-never-used-by-a-deployment")
DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/test"),
}
REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/15")
CELERY_BROKER_URL = REDIS_URL
AGENT_EXECUTOR = "inprocess"
CHANNEL_LAYERS = {"default": {"BACKEND": "config.channel_layers.LoopSafeInMemoryChannelLayer"}}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LLM_BACKEND = "simulated"
LLM_SIM_LATENCY_MS = 0
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Tests call Reflexion explicitly; no background jobs racing the test database.
REFLEXION_ENABLED = False
REFLEXION_DEBOUNCE_SECONDS = 0
# The fake OpenAI server speaks OpenAI's dialect; tests of the probe choose "auto" themselves.
LLM_STRUCTURED_OUTPUT = "json_schema"
LLM_STRUCTURED_OUTPUT_CACHE = env(
    "LLM_STRUCTURED_OUTPUT_CACHE", default="/tmp/agent-ops-test-llm-structured-output.json"
)
