"""The Redis transport closes a consumer that lost Redis the way a Celery worker closes it."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from kombu import Connection, Exchange, Queue
from kombu.transport import redis as kombu_redis

from config.broker import RedisTransport
from config.celery import app as celery_app
from tests.redis_server import RedisServer, own_redis_fixture  # noqa: F401


def _consumer_holding_a_message(url: str, transport: type) -> tuple[Connection, list[Any]]:
    """A consumer with one unacknowledged message and a BRPOP pending, as a worker has,
    also bound to an auto-deleted fanout queue, as a worker's event and gossip queues are."""
    queue = Queue("agents", Exchange("agents"), "agents")
    events = Queue("events", Exchange("events", type="fanout"), auto_delete=True)
    with Connection(url) as producer:
        producer.Producer().publish(
            {"trace_id": "t"}, exchange=queue.exchange, routing_key="agents", declare=[queue]
        )
    connection = Connection(url, transport=transport)
    held: list[Any] = []
    connection.Consumer([queue, events], callbacks=[lambda body, m: held.append(m)]).consume()
    connection.drain_events(timeout=5)
    for _ in range(5):  # until a wait times out: that leaves the next BRPOP pending
        try:
            connection.drain_events(timeout=0.2)
        except TimeoutError:
            break
    assert held and connection.default_channel._in_poll
    return connection, held


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=lambda s: s.name)
def test_a_consumer_that_lost_redis_closes_without_error(
    own_redis: RedisServer, stop_signal: signal.Signals
) -> None:
    # given a consumer holding an unacknowledged message while Redis goes away
    connection, held = _consumer_holding_a_message(own_redis.url, RedisTransport)
    own_redis.stop(stop_signal)

    # when it is cleaned up as Celery's consumer does on a connection error
    connection.collect(socket_timeout=1)
    connection.close()

    # then nothing escapes, and the held message is not acknowledged by accident
    assert not held[0].acknowledged


def test_kombus_own_transport_dies_in_that_close(own_redis: RedisServer) -> None:
    # The reason config.broker exists; when kombu fixes this, the override can go.
    connection, _ = _consumer_holding_a_message(own_redis.url, kombu_redis.Transport)
    own_redis.stop(signal.SIGKILL)
    connection.collect(socket_timeout=1)
    with pytest.raises(AttributeError, match="hostname"):
        connection.close()


def test_redis_brokers_use_the_restart_safe_transport() -> None:
    assert celery_app.conf.broker_url.startswith("redis://")
    assert celery_app.conf.broker_transport == "config.broker:RedisTransport"
    with celery_app.connection_for_write() as connection:
        assert isinstance(connection.transport, RedisTransport)
