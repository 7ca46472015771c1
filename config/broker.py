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
goes on and marks the channel closed, and a close after the transport was detached skips the
restore instead of crashing. The consumer then reconnects. Messages that could not be
restored (Redis is down) stay in Redis' unacked index and come back after
``visibility_timeout`` if Redis kept them.
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
        if getattr(self.connection, "client", None) is None and self._qos is not None:
            # Detached: no broker address is left to restore to. Any other step of an
            # earlier close that failed on the dead socket lands here too.
            self._qos.restore_at_shutdown = False
        super().close()


class RedisTransport(kombu_redis.Transport):
    Channel = Channel
