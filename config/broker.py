"""The Redis broker transport, with kombu's channel close made safe on a lost connection.

A worker that loses Redis while it holds unacknowledged messages (every running
``acks_late`` task) died with ``AttributeError: 'NoneType' object has no attribute
'hostname'``. kombu's ``Channel.close`` first finishes the pending BRPOP read; on a dead
socket that read raises a connection error before the channel is marked closed. Celery's
``Connection.collect()`` swallows that error and detaches the transport
(``transport.client = None``), then Celery closes the connection again; the second close of
the still-open channel restores the unacked messages, which builds a Redis pool from the
detached client and raises ``AttributeError``, which ``ignore_errors`` does not cover.

Here a connection error from that read ends the read like an empty one, so the first close
completes and marks the channel closed; the second close is a no-op and the consumer
reconnects. Messages that the first close could not restore (Redis is down) stay in Redis'
unacked index and come back after ``visibility_timeout`` if Redis kept them.
"""

from __future__ import annotations

from queue import Empty

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def close(self) -> None:
        if self._in_poll:
            try:
                self._brpop_read()
            except (Empty, *self.connection_errors):
                # The read is over either way; the close must still happen.
                pass
        super().close()


class RedisTransport(kombu_redis.Transport):
    Channel = Channel
