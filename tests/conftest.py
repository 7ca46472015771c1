"""Shared fixtures. Tests use the real local PostgreSQL and Redis; nothing is skipped."""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from django.conf import settings
from django.utils import timezone

from tests.fakes.openai_server import openai_server_fixture  # noqa: F401
from tests.served import ServedApp, app_teardown, embedded_app, production_app


@pytest.fixture(scope="session", autouse=True)
def redis_must_be_up() -> None:
    """Fail the whole run loudly (never skip) when Redis is down."""
    try:
        redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=3).ping()
    except redis.RedisError as exc:  # pragma: no cover - environment failure
        pytest.exit(f"Redis at {settings.REDIS_URL} is not reachable: {exc}", returncode=3)


@pytest.fixture(autouse=True)
def logging_state_restored() -> Iterator[None]:
    """Put logging back as each test found it: the root's level and handlers, every named
    logger's level, `disabled` and `propagate`, and `logging.disable`. A test that
    reconfigures logging (`logging.basicConfig(force=True)`, a Celery `app.log.setup`, a
    `dictConfig`) must not decide which records a later test's caplog receives."""
    root = logging.getLogger()
    manager = logging.root.manager
    root_state = (root.level, list(root.handlers), manager.disable)
    named = {
        name: (lg.level, lg.disabled, lg.propagate)
        for name, lg in list(manager.loggerDict.items())
        if isinstance(lg, logging.Logger)
    }
    yield
    root.setLevel(root_state[0])
    root.handlers[:] = root_state[1]
    logging.disable(root_state[2])
    for name, (level, disabled, propagate) in named.items():
        lg = logging.getLogger(name)
        lg.setLevel(level)
        lg.disabled, lg.propagate = disabled, propagate


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    """No in-process learning job outlives the test that queued it. The embedded shape
    hands ingested runs (`external_runs_hand_off`) and Reflexion (`reflexion_enqueue`) to
    one background thread and keeps their futures in `policies.tasks._pending` until a
    drain; a test that does not wait for them would leave them running under the tests
    that follow (touching their database and sandbox) and counted by the next test's
    `reflexion_inprocess_drain()`. Wait for them at the end of the test's call, while its
    database rows, settings and fake servers are still in place; a job still unfinished
    after the drain's timeout fails the test that queued it."""
    from policies.tasks import reflexion_inprocess_drain

    try:
        return (yield)
    finally:
        reflexion_inprocess_drain()


_REAL_TIMEZONE_NOW = timezone.now


@pytest.fixture(autouse=True)
def clock_not_left_patched() -> Iterator[None]:
    """A test may pin `django.utils.timezone.now` (mock.patch), but must put it back: a clock
    left frozen stamps every later `auto_now` with the same instant, so a later test sees
    two saves of a row as one (a re-saved seeded FaultRule keeps drawing from its old
    random stream). Fail the test that leaves it patched, and put the clock back."""
    yield
    if timezone.now is not _REAL_TIMEZONE_NOW:
        leaked = timezone.now
        timezone.now = _REAL_TIMEZONE_NOW
        pytest.fail(f"the test left django.utils.timezone.now patched ({leaked!r})")


@pytest.fixture(autouse=True)
def celery_current_app_kept() -> Iterator[None]:
    """`shared_task`s (run_agent) resolve to Celery's *current* app, which any new
    `Celery(...)` becomes unless made with `set_as_current=False`: a test that leaves its
    own app current sends every later run to that app's broker and pools (a closed pool
    failed three worker tests in CI). Fail that test, and make the project's app current."""
    from celery import current_app

    from config.celery import app as project_app

    yield
    leaked = current_app._get_current_object()
    if leaked is not project_app:
        project_app.set_current()
        pytest.fail(f"the test left another Celery app current ({leaked!r})")


@pytest.fixture(autouse=True)
def db_pool_threads_closed() -> Iterator[None]:
    """Runs on the process's loop write through a pool of threads that keep their
    connections (``traces.db_threads``): close them after each test, so none stays open on
    a database a later test flushes or the session drops."""
    yield
    from traces.db_threads import db_threads_close

    db_threads_close()


@pytest.fixture(autouse=True)
def embedded_worker_stopped() -> Iterator[None]:
    """A test that serves the ASGI app starts the embedded worker (its sweeper and periodic
    jobs run forever on the shared loop); stop it after the test, or it would sweep, and
    re-enqueue through whatever broker is set then, the runs of the tests that follow."""
    yield
    from agents.inprocess import embedded_worker_stop

    embedded_worker_stop()


@pytest.fixture(autouse=True)
def sandbox_fault_cache_fresh() -> Iterator[None]:
    """The sandbox caches fault rules per process; a rule from one test must not fire in
    the next (transactional tests flush the rows, not the cache)."""
    from sandbox.faults import fault_cache_clear

    fault_cache_clear()
    yield
    fault_cache_clear()


@pytest.fixture(autouse=True)
def runtime_policy_cache_fresh() -> Iterator[None]:
    """The compiled policy and the running experiment are cached per process for a
    second: a run in one test must not apply the policy a previous test activated, nor
    join the experiment it started (rolled-back rows stay cached)."""
    from policies.experiments import experiment_cache_clear
    from policies.selectors import runtime_policy_cache_clear

    runtime_policy_cache_clear()
    experiment_cache_clear()
    yield
    runtime_policy_cache_clear()
    experiment_cache_clear()


@pytest.fixture(autouse=True)
def external_agent_ids_fresh() -> Iterator[None]:
    """OTLP ingest remembers the Agent ids it filed runs under, per process: an id from a
    test whose rows were rolled back must not reach the next test's ingest."""
    from agents.external_runs import external_agent_ids_forget

    external_agent_ids_forget()
    yield
    external_agent_ids_forget()


@pytest.fixture(scope="session")
def _llm_probe_cache_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llm-probe") / "llm-structured-output.json"


@pytest.fixture(autouse=True)
def llm_probe_cache_fresh(settings: Any, _llm_probe_cache_path: Path) -> Iterator[None]:
    """The structured-output probe remembers a dialect per server, in this process and in
    a file: a dialect one test's fake server answered must not decide another test's
    requests, nor one run's file the next run's (test settings used a fixed /tmp path)."""
    from agents.llm import structured

    settings.LLM_STRUCTURED_OUTPUT_CACHE = str(_llm_probe_cache_path)
    _llm_probe_cache_path.unlink(missing_ok=True)
    structured._memory.clear()
    yield
    _llm_probe_cache_path.unlink(missing_ok=True)
    structured._memory.clear()


@pytest.fixture(autouse=True)
def login_failures_counted_per_test(settings: Any) -> None:
    """Each test counts failed sign-ins from zero: the cache (Redis) outlives a test, and
    every test client signs in from the same address."""
    import uuid

    settings.LOGIN_FAILURE_CACHE_PREFIX = f"login-failures-test-{uuid.uuid4().hex}"


@pytest.fixture
def error_rules(db: None) -> None:
    """The default classifier rows. migration_rows_survive_flushes already puts them back
    after a transactional test's flush; a test that needs them says so here."""
    from traces.classifier import errorrules_seed_defaults

    errorrules_seed_defaults()


@pytest.fixture
def support_agent(db: None) -> Any:
    from agents.services import agent_ensure_default, tools_sync

    agent = agent_ensure_default()
    tools_sync(agents=[agent])
    return agent


@pytest.fixture
def small_shop(db: None) -> dict[str, int]:
    from sandbox.generate import shop_generate

    return shop_generate(seed=42, users=30, orders=60, products=8)


@pytest.fixture
def live_sandbox(live_server: Any, settings: Any) -> str:
    """The sandbox served over real HTTP by the live server; the runtime's SANDBOX_BASE_URL."""
    base = f"{live_server.url}/sandbox/api"
    settings.SANDBOX_BASE_URL = base
    return base


@pytest.fixture
def roles(db: None) -> None:
    """The role groups, as reviews.roles defines them (migration_rows_survive_flushes
    already puts them back after a transactional test's flush)."""
    from reviews.roles import roles_sync

    roles_sync()


def _role_member(django_user_model: Any, username: str, role: str, **flags: bool) -> Any:
    from django.contrib.auth.models import Group

    user = django_user_model.objects.create_user(
        username=username, password=f"pw-{username}-123", **flags
    )
    user.groups.add(Group.objects.get(name=role))
    return user


@pytest.fixture
def support_user(roles: None, django_user_model: Any) -> Any:
    return _role_member(django_user_model, "sam", "support")


@pytest.fixture
def support_user2(roles: None, django_user_model: Any) -> Any:
    return _role_member(django_user_model, "sue", "support")


@pytest.fixture
def ops_user(roles: None, django_user_model: Any) -> Any:
    return _role_member(django_user_model, "olga", "ops")


@pytest.fixture
def admin_role_user(roles: None, django_user_model: Any) -> Any:
    """Like the demo admin: superuser and staff, the only role that opens /admin/."""
    return _role_member(django_user_model, "ada", "admin", is_staff=True, is_superuser=True)


def _migration_rows_reseed(**_: Any) -> None:
    from reviews.roles import roles_sync
    from traces.classifier import errorrules_seed_defaults

    errorrules_seed_defaults()
    roles_sync()


@pytest.fixture(scope="session", autouse=True)
def migration_rows_survive_flushes(django_db_setup: None) -> Iterator[None]:
    """A transactional test ends by flushing every table, and with them the rows the data
    migrations wrote (the classifier's rules, the role groups): whatever test runs next
    would see an installation no `migrate` produces, so the suite would pass or fail
    with its order. Django emits post_migrate after that flush (it recreates content
    types and permissions then); this puts the migrations' rows back at the same moment.
    Connected after the test database is migrated, so the migrations' own seeding is
    what the first tests see (and `test_migration_seeds_the_default_table` checks)."""
    from django.apps import apps
    from django.db.models.signals import post_migrate

    # Once per flush, after every app's permissions exist: the signal is sent once per app
    # with models, in INSTALLED_APPS order.
    last = [config for config in apps.get_app_configs() if config.models_module][-1]
    post_migrate.connect(
        _migration_rows_reseed, sender=last, dispatch_uid="tests.migration_rows_reseed"
    )
    yield
    post_migrate.disconnect(dispatch_uid="tests.migration_rows_reseed")


@pytest.fixture(scope="session", autouse=True)
def close_runner_connections(django_db_setup: None) -> Iterator[None]:
    """Runs touch the DB from asgiref's shared sync thread; close its connection at the end
    so the test database can be dropped."""
    yield
    from asgiref.sync import SyncToAsync
    from django.db import connections

    SyncToAsync.single_thread_executor.submit(connections.close_all).result(timeout=10)


# --- the app served by bin/serve, once per session and shape ------------------------


@pytest.fixture(scope="session")
def embedded_server() -> Iterator[ServedApp]:
    app = embedded_app(Path(tempfile.mkdtemp(prefix="agentops-embedded-")))
    try:
        app.start()
        yield app
    finally:
        app_teardown(app)


@pytest.fixture(scope="session")
def production_server() -> Iterator[ServedApp]:
    app = production_app(Path(tempfile.mkdtemp(prefix="agentops-production-")))
    try:
        app.start()
        yield app
    finally:
        app_teardown(app)


@pytest.fixture(scope="session", params=["embedded", "production"])
def served(request: pytest.FixtureRequest) -> ServedApp:
    return request.getfixturevalue(f"{request.param}_server")
