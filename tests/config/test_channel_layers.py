"""The embedded shape's channel layer: a group_send from the in-process worker's loop
thread reaches a consumer waiting on the web server's loop."""

from __future__ import annotations

import asyncio
import threading

from channels.layers import get_channel_layer

from config.channel_layers import LoopSafeInMemoryChannelLayer

# Bounds a hung test only; nothing here asserts on time.
RECEIVE_TIMEOUT = 10


def test_the_test_settings_use_the_loop_safe_layer() -> None:
    assert isinstance(get_channel_layer(), LoopSafeInMemoryChannelLayer)


def test_a_group_send_from_another_threads_loop_reaches_the_waiting_receiver() -> None:
    layer = LoopSafeInMemoryChannelLayer()

    async def consumer_side() -> dict:
        channel = await layer.new_channel()
        await layer.group_add("run.abc", channel)
        waiting = asyncio.ensure_future(layer.receive(channel))
        await asyncio.sleep(0)  # the receive is now parked on this loop's queue
        # the worker's side: its own thread and event loop
        await asyncio.to_thread(
            asyncio.run, layer.group_send("run.abc", {"type": "run.status", "status": "running"})
        )
        return await asyncio.wait_for(waiting, RECEIVE_TIMEOUT)

    # Debug mode makes asyncio refuse a foreign thread touching this loop's futures, which
    # is what the stock in-memory layer does here (and then nothing wakes this loop, so the
    # scenario runs in a thread whose join bounds the hang).
    received: list[dict] = []
    web = threading.Thread(
        target=lambda: received.append(asyncio.run(consumer_side(), debug=True)), daemon=True
    )
    web.start()
    web.join(RECEIVE_TIMEOUT * 2)
    assert received == [{"type": "run.status", "status": "running"}]


def test_a_new_loop_takes_the_layer_over_from_a_closed_one() -> None:
    layer = LoopSafeInMemoryChannelLayer()

    async def round_trip(text: str) -> dict:
        channel = await layer.new_channel()
        await layer.group_add("run.abc", channel)
        await layer.group_send("run.abc", {"type": "run.status", "status": text})
        return await asyncio.wait_for(layer.receive(channel), RECEIVE_TIMEOUT)

    assert asyncio.run(round_trip("first"))["status"] == "first"
    assert asyncio.run(round_trip("second"))["status"] == "second"
