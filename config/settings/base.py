"""Settings shared by every deployment shape; everything that differs comes from env vars."""

import os
from pathlib import Path
from urllib.parse import urlsplit

import environ

from config.shape import dotenv_load, env_file_path, sandbox_base_url_for

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()
dotenv_load(target=os.environ, path=env_file_path(os.environ))

# No default: each shape says where its key comes from (config/shape.py).
SECRET_KEY = env("DJANGO_SECRET_KEY", default="")
DEBUG = env.bool("DJANGO_DEBUG", default=False)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "agents",
    "traces",
    "policies",
    "reviews",
    "sandbox",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "config.content_security.content_security_policy",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # A view that cannot reach the database answers 503, not 500 (config/db_unavailable.py).
    "config.db_unavailable.DatabaseUnavailableMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = None
ASGI_APPLICATION = "config.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "agents.context_processors.llm_backend",
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The in-process worker writes Steps from another thread; wait on the lock, don't fail.
    DATABASES["default"].setdefault("OPTIONS", {})["timeout"] = 30
    DATABASES["default"]["OPTIONS"]["transaction_mode"] = "IMMEDIATE"
DATABASES["default"]["CONN_MAX_AGE"] = env.int("DB_CONN_MAX_AGE", default=0)


def database_named(database: dict) -> dict:
    """PostgreSQL sessions carry the process's name (``pg_stat_activity.application_name``):
    bin/serve gives each child its own (agentops-web, agentops-worker1, ...)."""
    if database["ENGINE"] == "django.db.backends.postgresql":
        database.setdefault("OPTIONS", {})["application_name"] = env.str(
            "DB_APPLICATION_NAME", default="agentops"
        )
    return database


database_named(DATABASES["default"])
# Threads (each holding one connection) that serve the database calls of the runs on a
# process's event loop; 0 = by engine: 8 on PostgreSQL, 1 on SQLite (traces.db_threads).
AGENT_DB_THREADS = env.int("AGENT_DB_THREADS", default=0)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
# Failed sign-ins (login page, HTTP Basic, admin) are limited: past this many failures for
# one user name, or from one client address, within the window, attempts are refused
# without checking the password until the window has passed (config/login_limits.py).
AUTHENTICATION_BACKENDS = ["config.login_limits.LimitedModelBackend"]
LOGIN_FAILURES_PER_USER = env.int("LOGIN_FAILURES_PER_USER", default=10)
LOGIN_FAILURES_PER_ADDRESS = env.int("LOGIN_FAILURES_PER_ADDRESS", default=50)
# One user name from every address together (LOGIN_FAILURES_PER_USER counts per address).
LOGIN_FAILURES_PER_USER_ALL_ADDRESSES = env.int(
    "LOGIN_FAILURES_PER_USER_ALL_ADDRESSES", default=100
)
LOGIN_FAILURE_WINDOW_S = env.int("LOGIN_FAILURE_WINDOW_S", default=900)  # 0: no limit
LOGIN_FAILURE_CACHE_PREFIX = "login-failures"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Serve straight from the app and static/ dirs; production collects into STATIC_ROOT.
WHITENOISE_USE_FINDERS = True

# --- Redis, Celery, Channels -------------------------------------------------
REDIS_URL = env("REDIS_URL", default="")

# "celery" sends runs to Celery workers; "inprocess" runs them on an event-loop thread
# inside the web process (the embedded default, no Redis needed).
AGENT_EXECUTOR = env("AGENT_EXECUTOR", default="celery" if REDIS_URL else "inprocess")

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=REDIS_URL or "memory://")
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_DEFAULT_QUEUE = "default"
CELERY_TASK_ROUTES = {
    "agents.run_agent": {"queue": "agents"},
    "policies.*": {"queue": "reflexion"},
}
# Hard limit of a run; the soft limit lets the task end the run cleanly first.
AGENT_RUN_SOFT_TIME_LIMIT = env.int("AGENT_RUN_SOFT_TIME_LIMIT", default=120)
AGENT_RUN_HARD_TIME_LIMIT = env.int("AGENT_RUN_HARD_TIME_LIMIT", default=150)
# Redis must not redeliver a task that is still running: longer than the hard limit.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": AGENT_RUN_HARD_TIME_LIMIT * 4}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# How often stuck runs are re-enqueued: by Celery beat, or by the embedded worker's sweeper.
AGENT_SWEEP_INTERVAL_SECONDS = env.float("AGENT_SWEEP_INTERVAL_SECONDS", default=60.0)
# A broker restart must not end a worker (README, "Broker restarts"): keep reconnecting for
# as long as Redis is away, at start-up too. Runs in flight go on: they need PostgreSQL, not
# the broker, the threads pool could not cancel them anyway, and running one twice is
# idempotent per trace id. Runs whose messages Redis lost are re-enqueued by the sweeper.
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = False
# How often open canary rollouts are judged: by Celery beat, or by the embedded worker.
ROLLOUT_EVALUATE_INTERVAL_SECONDS = env.float("ROLLOUT_EVALUATE_INTERVAL_SECONDS", default=60.0)
# The learning sweep (policies.tasks.runs_learning_sweep): every this many seconds (Celery
# beat, or the embedded worker), ended runs whose hand-off to the learning loop (scoring,
# Reflexion) has not finished this many seconds after they ended are handed off again.
LEARNING_SWEEP_INTERVAL_SECONDS = env.float("LEARNING_SWEEP_INTERVAL_SECONDS", default=60.0)
LEARNING_SWEEP_GRACE_SECONDS = env.float("LEARNING_SWEEP_GRACE_SECONDS", default=300.0)
# Retention (traces.retention): ended runs older than this many days are deleted with their
# steps, in batches, once per TRACE_PRUNE_INTERVAL_SECONDS (Celery beat, or the embedded
# worker). 0 keeps every run forever. `manage.py traces_prune` runs a pass by hand.
TRACE_RETENTION_DAYS = env.int("TRACE_RETENTION_DAYS", default=0)
TRACE_PRUNE_INTERVAL_SECONDS = env.float("TRACE_PRUNE_INTERVAL_SECONDS", default=3600.0)
CELERY_BEAT_SCHEDULE = {
    "agents-sweep-stuck-runs": {
        "task": "agents.sweep_stuck_runs",
        "schedule": AGENT_SWEEP_INTERVAL_SECONDS,
    },
    "policies-evaluate-rollouts": {
        "task": "policies.evaluate_rollouts",
        "schedule": ROLLOUT_EVALUATE_INTERVAL_SECONDS,
    },
    "policies-learning-sweep": {
        "task": "policies.learning_sweep",
        "schedule": LEARNING_SWEEP_INTERVAL_SECONDS,
    },
    # A no-op while TRACE_RETENTION_DAYS is 0.
    "traces-prune": {
        "task": "traces.prune",
        "schedule": TRACE_PRUNE_INTERVAL_SECONDS,
    },
}

if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "config.channel_layers.LoopSafeInMemoryChannelLayer"}}
# Push each committed step and status change to the chat's WebSocket listeners.
LIVE_RUN_EVENTS = env.bool("LIVE_RUN_EVENTS", default=True)
# Origins allowed to frame the chat widget (/chat/embed/), e.g. https://helpdesk.example.com
CHAT_EMBED_ALLOWED_ORIGINS = env.list("CHAT_EMBED_ALLOWED_ORIGINS", default=[])
# Sent with every HTML page (config/content_security.py); empty: none. No page has an inline
# script; styles may be inline (htmx adds its indicator's, one input has a width). No page
# may be framed but the embeddable chat, which names its own frame-ancestors.
CONTENT_SECURITY_POLICY = env(
    "DJANGO_CONTENT_SECURITY_POLICY",
    default=(
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'self'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
)
# A cross-site embed needs the cookies sent to framed pages: "None" (HTTPS only).
SESSION_COOKIE_SAMESITE = CSRF_COOKIE_SAMESITE = env("DJANGO_COOKIE_SAMESITE", default="Lax")

# --- REST framework ----------------------------------------------------------
REST_FRAMEWORK = {
    # Tokens first: one indexed lookup per request, and a 401 with `WWW-Authenticate: Token`
    # for anonymous calls. Sessions serve the pages' htmx; Basic stays for compatibility but
    # hashes the password on every request.
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.BasicAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": [
        "config.api_parsers.BoundedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PAGINATION_CLASS": "config.api_pagination.StrictLimitOffsetPagination",
    "PAGE_SIZE": 50,
    # DRF's handler, plus a 503 when the database cannot be reached.
    "EXCEPTION_HANDLER": "config.errors.api_exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent Ops API",
    "DESCRIPTION": (
        "Runs, traces and steps of the ReAct runtime. Authenticate with "
        "`Authorization: Token <key>` (`manage.py api_token <username>` prints the key)."
    ),
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The schema and its docs page for signed-in users and token holders only: the API's
    # shape is nobody else's business (least privilege).
    "SERVE_PERMISSIONS": ["rest_framework.permissions.IsAuthenticated"],
    # Swagger UI and ReDoc from the vendored sidecar package: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # No call to the public validator.swagger.io from the docs page.
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
}

# The one length limit of a question, for the API, the chat page and `manage.py ask`.
AGENT_QUERY_MAX_CHARS = env.int("AGENT_QUERY_MAX_CHARS", default=4000)

# --- LLM ---------------------------------------------------------------------
LLM_BACKEND = env("LLM_BACKEND", default="simulated")
LLM_BASE_URL = env("LLM_BASE_URL", default="")
LLM_MODEL = env("LLM_MODEL", default="gpt-4o-mini")
LLM_API_KEY = env("LLM_API_KEY", default="")
LLM_TIMEOUT_SECONDS = env.float("LLM_TIMEOUT_SECONDS", default=30.0)
LLM_MAX_RETRIES = env.int("LLM_MAX_RETRIES", default=3)
# The longest one model call may take, retries and backoff included; it must fit inside the
# run's and Reflexion's time limits (system checks agents.E101-E104). Default: 60 s.
LLM_CALL_BUDGET_SECONDS = env.float("LLM_CALL_BUDGET_SECONDS", default=60.0)
LLM_TEMPERATURE = env.float("LLM_TEMPERATURE", default=0.1)
# How a request asks for schema-shaped JSON (docs/models.md): auto (probe once, cached in
# var/), json_schema (OpenAI), json_object (llama-cpp-python), guided_json (vLLM), tools,
# or prompt (no constraint; the lenient parser reads the text).
LLM_STRUCTURED_OUTPUT = env("LLM_STRUCTURED_OUTPUT", default="auto")
LLM_STRUCTURED_OUTPUT_CACHE = env(
    "LLM_STRUCTURED_OUTPUT_CACHE", default=str(BASE_DIR / "var" / "llm-structured-output.json")
)
# max_tokens per call type; a JSON object merged over these defaults, e.g.
# LLM_MAX_TOKENS='{"reasoning": 300}'. A runaway generation stops there.
LLM_MAX_TOKENS = {
    "reasoning": 400,
    "reflection": 150,
    "rag_draft": 400,
    "rag_grade": 200,
    "reflexion": 400,
    "probe": 64,
    "default": 512,
    **env.json("LLM_MAX_TOKENS", default={}),
}
# USD per 1M tokens. Unset: agents/llm/pricing.py's table by model name, 0 for a model on a
# loopback or private server (a local model costs no tokens).
LLM_PRICE_INPUT_PER_MTOK = env.float("LLM_PRICE_INPUT_PER_MTOK", default=None)
LLM_PRICE_OUTPUT_PER_MTOK = env.float("LLM_PRICE_OUTPUT_PER_MTOK", default=None)
# The simulated model: a seeded, deterministic test and demo instrument.
LLM_SIM_SEED = env.int("LLM_SIM_SEED", default=7)
LLM_SIM_LATENCY_MS = env.int("LLM_SIM_LATENCY_MS", default=0)
LLM_SIM_ERROR_RATES = env.json(
    "LLM_SIM_ERROR_RATES",
    default={
        "string_for_int": 0.08,
        "name_for_sku": 0.15,
        "skip_tool": 0.05,
        "malformed_json": 0.05,
        "repeat_action": 0.05,
    },
)
LLM_SIM_HINT_FOLLOW_RATE = env.float("LLM_SIM_HINT_FOLLOW_RATE", default=0.9)

# --- Runtime breakers and pipeline --------------------------------------------
AGENT_MAX_ITERATIONS = env.int("AGENT_MAX_ITERATIONS", default=8)
# Runs one user may have queued or running at once (the API and the chat answer 429 / an
# error past it): a loop in a client, or a stolen token, cannot queue unbounded model calls.
# 0: no limit (load generators posting as one user).
AGENT_RUNS_IN_FLIGHT_PER_USER = env.int("AGENT_RUNS_IN_FLIGHT_PER_USER", default=100)
AGENT_MAX_CONSECUTIVE_VALIDATION_FAILURES = env.int(
    "AGENT_MAX_CONSECUTIVE_VALIDATION_FAILURES", default=2
)
AGENT_TOOL_TIMEOUTS_PER_HOUR_TO_SUSPEND = env.int(
    "AGENT_TOOL_TIMEOUTS_PER_HOUR_TO_SUSPEND", default=5
)
AGENT_TOOL_SUSPEND_MINUTES = env.int("AGENT_TOOL_SUSPEND_MINUTES", default=60)
AGENT_REPEAT_STOP_AT = env.int("AGENT_REPEAT_STOP_AT", default=3)
# Reasoning guards: how many times per run a thought stating facts nothing shown to the
# model holds (UNGROUNDED_THOUGHT), and a fake reflection (FAKE_REFLECTION), are sent back.
AGENT_THINK_GUARD_REPROMPTS = env.int("AGENT_THINK_GUARD_REPROMPTS", default=1)
AGENT_REFLECTION_GUARD_REPROMPTS = env.int("AGENT_REFLECTION_GUARD_REPROMPTS", default=1)
AGENT_OBSERVATION_MAX_CHARS = env.int("AGENT_OBSERVATION_MAX_CHARS", default=2000)
AGENT_HISTORY_VERBATIM_ROUNDS = env.int("AGENT_HISTORY_VERBATIM_ROUNDS", default=3)
AGENT_FALLBACK_REPLY = env(
    "AGENT_FALLBACK_REPLY",
    default=(
        "Sorry, I could not complete this request automatically. "
        "A support colleague will follow up with you shortly."
    ),
)
# How answers write dates, times and prices when a run names no locale or time zone
# of its own (POST /api/runs/ accepts both per request).
AGENT_ANSWER_LOCALE = env("AGENT_ANSWER_LOCALE", default="en-US")
AGENT_ANSWER_TIME_ZONE = env("AGENT_ANSWER_TIME_ZONE", default="UTC")

# --- Tool executor -------------------------------------------------------------
# The sandbox shop is reached over HTTP like any external API.
SANDBOX_BASE_URL = env("SANDBOX_BASE_URL", default=sandbox_base_url_for(os.environ))
# The runtime calls the sandbox on this very server, by the host in SANDBOX_BASE_URL.
_sandbox_host = urlsplit(SANDBOX_BASE_URL).hostname or ""
_sandbox_host = f"[{_sandbox_host}]" if ":" in _sandbox_host else _sandbox_host
if _sandbox_host and _sandbox_host not in ALLOWED_HOSTS:
    ALLOWED_HOSTS.append(_sandbox_host)
# URL prefixes a tool endpoint may point at; the sandbox is always allowed.
TOOL_ENDPOINT_ALLOWLIST = env.list("TOOL_ENDPOINT_ALLOWLIST", default=[])
TOOL_DEFAULT_TIMEOUT_SECONDS = env.float("TOOL_DEFAULT_TIMEOUT_SECONDS", default=3.0)
TOOL_MAX_RESPONSE_BYTES = env.int("TOOL_MAX_RESPONSE_BYTES", default=256 * 1024)
TOOL_MAX_REDIRECTS = env.int("TOOL_MAX_REDIRECTS", default=3)

# Every handler redacts secrets (keys, tokens, passwords, card numbers, the configured
# LLM_API_KEY and tool credentials) from messages, extras and tracebacks. 4xx responses
# (an expected PermissionDenied above all) log one line with path and user id, without
# the traceback Django attaches; 5xx keep theirs. The filter also sits on django.request
# itself, so that handlers added later (pytest's caplog, Sentry) get the one-line record.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "redact": {"()": "traces.redaction.RedactingFilter"},
        "client_error_one_line": {"()": "traces.redaction.ClientErrorOneLineFilter"},
    },
    "formatters": {
        "kv": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "kv",
            "filters": ["client_error_one_line", "redact"],
        }
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {
        # Through the root's filtered handler only (Django's own would bypass the filters).
        "django": {"handlers": [], "level": "INFO", "propagate": True},
        "django.request": {"filters": ["client_error_one_line"]},
        "httpx": {"level": "WARNING"},
        "daphne": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
    },
}
# Celery would otherwise replace the root handlers with its own, unfiltered ones.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Reflexion ---------------------------------------------------------------------
REFLEXION_ENABLED = env.bool("REFLEXION_ENABLED", default=True)
REFLEXION_DEBOUNCE_SECONDS = env.int("REFLEXION_DEBOUNCE_SECONDS", default=30)
# Reflexion's task deadline; the hard limit kills it 30 s later.
REFLEXION_SOFT_TIME_LIMIT = env.int("REFLEXION_SOFT_TIME_LIMIT", default=120)
# How long `manage.py ask` waits for an in-process Reflexion before saying it goes on.
ASK_REFLEXION_WAIT_SECONDS = env.float("ASK_REFLEXION_WAIT_SECONDS", default=150.0)

# --- OpenTelemetry ---------------------------------------------------------------------
# Ingest (POST /otlp/v1/traces): a bigger body (after decompression too) or more GenAI spans
# per request is a 413, which exporters do not retry: the limits sit above what they send
# by default (SDKs 512 spans a batch, with message content; the Collector's batch processor
# 8192 spans of every kind). Export is configured by the standard OTEL_EXPORTER_OTLP_*
# variables alone (docs/observability.md).
OTLP_MAX_BODY_BYTES = env.int("OTLP_MAX_BODY_BYTES", default=16 * 1024 * 1024)
# The largest request body the web server reads at all (config/daphne_main.py): a larger
# one is a 413 before it is stored anywhere, authenticated or not. Above the OTLP limit.
REQUEST_BODY_MAX_BYTES = env.int(
    "REQUEST_BODY_MAX_BYTES", default=max(20 * 1024 * 1024, OTLP_MAX_BODY_BYTES + 1024 * 1024)
)
OTLP_MAX_SPANS = env.int("OTLP_MAX_SPANS", default=8192)

# --- Review queue ----------------------------------------------------------------------
# Auto-merge: a strategy whose replay passed and whose confidence is at least the minimum
# is published without a reviewer (still through strategy_activate, so still through the
# canary); the rest wait in the review queue.
REVIEW_AUTO_MERGE = env.bool("REVIEW_AUTO_MERGE", default=True)
REVIEW_AUTO_MERGE_MIN_CONFIDENCE = env.float("REVIEW_AUTO_MERGE_MIN_CONFIDENCE", default=0.85)

# --- Canary rollouts (docs/learning-loop.md, "Rollouts") -------------------------------
# "canary": an approved strategy's version starts at the first ROLLOUT_SCHEDULE step and is
# promoted or rolled back by the evaluator; "at_once": it becomes the active version at once.
POLICY_PUBLISH = env("POLICY_PUBLISH", default="canary")
ROLLOUT_SCHEDULE = env.list("ROLLOUT_SCHEDULE", cast=int, default=[1, 5, 25, 50, 100])
# Runs per arm, in the current step's sliding window, before the evaluator judges at all.
ROLLOUT_MIN_SAMPLES = env.int("ROLLOUT_MIN_SAMPLES", default=100)
# The sliding window in seconds (it also restarts at every step).
ROLLOUT_WINDOW = env.int("ROLLOUT_WINDOW", default=24 * 3600)
# Significance level of the one-sided two-proportion tests on error rate.
ROLLOUT_ALPHA = env.float("ROLLOUT_ALPHA", default=0.05)
# The canary's p95 may exceed stable's by less than this.
ROLLOUT_LATENCY_BUDGET_MS = env.int("ROLLOUT_LATENCY_BUDGET_MS", default=100)
# Runs per arm before p95 latency is judged (a p95 of a handful of runs is noise).
ROLLOUT_LATENCY_MIN_SAMPLES = env.int("ROLLOUT_LATENCY_MIN_SAMPLES", default=30)
# This many canary runs failing with an error type stable does not show: roll back at once.
ROLLOUT_BURST = env.int("ROLLOUT_BURST", default=5)

if REDIS_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": REDIS_URL}
    }
