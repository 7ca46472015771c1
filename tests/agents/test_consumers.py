"""The chat's WebSocket: who may watch a run, and resuming a run's stream without gaps or
duplicates, with live events racing the replay."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from channels.auth import AuthMiddlewareStack
from channels.layers import get_channel_layer
from channels.routing import URLRouter
from channels.security.websocket import AllowedHostsOriginValidator
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.utils import timezone

from agents.routing import websocket_urlpatterns
from agents.sink import RunSink
from traces.live import run_group, steps_publish
from traces.models import Step, Trace
from traces.records import StepRecord
from traces.services import trace_create, trace_finish

pytestmark = pytest.mark.django_db(transaction=True)

# Bounds a hung test only; nothing here asserts on time.
RECEIVE_TIMEOUT = 10

ROUTER = URLRouter(websocket_urlpatterns)


@pytest.fixture
def support_users(support_user: Any, support_user2: Any) -> tuple[Any, Any]:
    return support_user, support_user2


def make_run(agent: Any, user: Any, steps: int = 0) -> Trace:
    trace = trace_create(
        agent_id=agent.pk, query="Where is #W1?", llm_backend="simulated", created_by_id=user.pk
    )
    for number in range(1, steps + 1):
        Step.objects.create(
            trace=trace,
            step_number=number,
            phase="reasoning",
            thought=f"thought {number}",
            started_at=timezone.now(),
        )
    return trace


def communicator(trace: Trace, user: Any, after: int | None = None) -> WebsocketCommunicator:
    path = f"/ws/runs/{trace.pk}/" + ("" if after is None else f"?after={after}")
    comm = WebsocketCommunicator(ROUTER, path)
    comm.scope["user"] = user
    return comm


async def receive_until_status(comm: WebsocketCommunicator) -> tuple[list[int], dict]:
    numbers: list[int] = []
    while True:
        message = await comm.receive_json_from(timeout=RECEIVE_TIMEOUT)
        if message["type"] == "status":
            return numbers, message
        numbers.append(message["step"])


def test_an_anonymous_socket_is_refused(support_agent: Any, support_users: Any) -> None:
    from django.contrib.auth.models import AnonymousUser

    trace = make_run(support_agent, support_users[0])

    async def scenario() -> tuple[bool, Any]:
        comm = communicator(trace, AnonymousUser())
        result = await comm.connect(timeout=RECEIVE_TIMEOUT)
        await comm.disconnect()
        return result

    assert async_to_sync(scenario)() == (False, 4401)


def test_a_support_user_cannot_subscribe_to_another_users_run(
    support_agent: Any, support_users: Any
) -> None:
    alice, bob = support_users
    trace = make_run(support_agent, alice, steps=2)

    async def scenario() -> tuple[bool, Any]:
        comm = communicator(trace, bob)
        result = await comm.connect(timeout=RECEIVE_TIMEOUT)
        await comm.disconnect()
        return result

    assert async_to_sync(scenario)() == (False, 4403)


@pytest.mark.parametrize("who", ["owner", "ops"])
def test_the_owner_and_ops_staff_may_watch_a_run(
    support_agent: Any, support_users: Any, ops_user: Any, who: str
) -> None:
    trace = make_run(support_agent, support_users[0], steps=2)
    watcher = support_users[0] if who == "owner" else ops_user

    async def scenario() -> tuple[list[int], dict]:
        comm = communicator(trace, watcher)
        connected, _ = await comm.connect(timeout=RECEIVE_TIMEOUT)
        assert connected
        received = await receive_until_status(comm)
        await comm.disconnect()
        return received

    numbers, status = async_to_sync(scenario)()
    assert numbers == [1, 2]
    assert status["status"] == "queued" and status["terminal"] is False


@pytest.mark.parametrize(("after", "expected"), [(0, [1, 2, 3, 4, 5]), (3, [4, 5]), (5, [])])
def test_a_reconnect_replays_only_the_steps_after_the_last_one_seen(
    support_agent: Any, support_users: Any, after: int, expected: list[int]
) -> None:
    trace = make_run(support_agent, support_users[0], steps=5)

    async def scenario() -> list[int]:
        comm = communicator(trace, support_users[0], after=after)
        await comm.connect(timeout=RECEIVE_TIMEOUT)
        numbers, _ = await receive_until_status(comm)
        await comm.disconnect()
        return numbers

    assert async_to_sync(scenario)() == expected


def test_live_events_racing_the_replay_arrive_once_and_in_order(
    support_agent: Any, support_users: Any
) -> None:
    # given a run with 3 stored steps and a client that had seen step 1
    trace = make_run(support_agent, support_users[0], steps=3)

    async def scenario() -> list[int]:
        comm = communicator(trace, support_users[0], after=1)
        await comm.connect(timeout=RECEIVE_TIMEOUT)
        replayed, _ = await receive_until_status(comm)
        # when the worker's events arrive late for steps the replay already sent (2, 3),
        # step 4 is committed and announced, step 5's event is lost and step 6's arrives
        await sync_to_async(_store_steps)(trace, [4, 5, 6])
        steps = await sync_to_async(_steps)(trace, [2, 3, 4, 6])
        await steps_publish(steps)
        # a status event after them: the consumer handles events in order, so anything it
        # sends for the step events comes before this status
        await get_channel_layer().group_send(
            run_group(trace.pk), {"type": "run.status", "status": "running"}
        )
        live, _ = await receive_until_status(comm)
        await comm.disconnect()
        return replayed + live

    # then the client got every step after 1 exactly once, in order
    assert async_to_sync(scenario)() == [2, 3, 4, 5, 6]


def _store_steps(trace: Trace, numbers: list[int]) -> None:
    for number in numbers:
        Step.objects.create(
            trace=trace, step_number=number, phase="action", ok=True, started_at=timezone.now()
        )


def _steps(trace: Trace, numbers: list[int]) -> list[Step]:
    return list(Step.objects.filter(trace=trace, step_number__in=numbers).order_by("step_number"))


def test_steps_written_by_the_recorder_stream_to_a_watcher(
    support_agent: Any, support_users: Any
) -> None:
    trace = make_run(support_agent, support_users[0])

    async def scenario() -> tuple[list[dict], dict]:
        comm = communicator(trace, support_users[0])
        await comm.connect(timeout=RECEIVE_TIMEOUT)
        await receive_until_status(comm)
        recorder = RunSink(trace_id=str(trace.pk))
        await recorder.write_step(
            StepRecord(
                phase="reasoning",
                round_number=1,
                thought="Look the order up",
                action_type="tool",
                tool_name="get_order",
                action_input={"order_id": "#W1"},
            )
        )
        await recorder.write_step(
            StepRecord(phase="final", round_number=1, response_summary="Order #W1 shipped.")
        )
        steps = [await comm.receive_json_from(timeout=RECEIVE_TIMEOUT) for _ in range(2)]
        await sync_to_async(trace_finish)(
            trace_id=str(trace.pk), status="finished", final_answer="Order #W1 shipped."
        )
        status = await comm.receive_json_from(timeout=RECEIVE_TIMEOUT)
        await comm.disconnect()
        return steps, status

    steps, status = async_to_sync(scenario)()
    assert [s["step"] for s in steps] == [1, 2]
    assert "thinking" in steps[0]["html"] and "calling a tool" in steps[0]["html"]
    assert "get_order" in steps[0]["html"] and "&quot;order_id&quot;" in steps[0]["html"]
    # the answer is shown once: in the draft, not again in the final step's line
    assert "Order #W1 shipped." not in steps[1]["html"]
    assert status["terminal"] is True and status["status"] == "finished"
    assert status["html"].count("Order #W1 shipped.") == 1
    assert "data-copy" in status["html"] and "Hand over to a human" in status["html"]


def test_the_socket_authenticates_with_the_session_and_checks_the_origin(
    support_agent: Any, support_users: Any, settings: Any
) -> None:
    settings.ALLOWED_HOSTS = ["testserver"]
    trace = make_run(support_agent, support_users[0], steps=1)
    client = Client()
    client.force_login(support_users[0])
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    app = AllowedHostsOriginValidator(AuthMiddlewareStack(ROUTER))

    async def connect(origin: bytes) -> bool:
        comm = WebsocketCommunicator(
            app, f"/ws/runs/{trace.pk}/", headers=[(b"cookie", cookie), (b"origin", origin)]
        )
        connected, _ = await comm.connect(timeout=RECEIVE_TIMEOUT)
        await comm.disconnect()
        return connected

    assert async_to_sync(connect)(b"http://testserver") is True
    assert async_to_sync(connect)(b"http://evil.example") is False


def test_a_run_that_ends_before_its_last_step_event_still_sends_that_step_first(
    support_agent: Any, support_users: Any
) -> None:
    trace = make_run(support_agent, support_users[0], steps=2)

    async def scenario() -> list[Any]:
        comm = communicator(trace, support_users[0])
        await comm.connect(timeout=RECEIVE_TIMEOUT)
        await receive_until_status(comm)
        # the last step is committed, but its event is still in flight when the run ends
        await sync_to_async(_store_steps)(trace, [3])
        await sync_to_async(trace_finish)(
            trace_id=str(trace.pk), status="finished", final_answer="Done."
        )
        steps, status = await receive_until_status(comm)
        await comm.disconnect()
        return [*steps, status["status"]]

    assert async_to_sync(scenario)() == [3, "finished"]


def test_model_text_in_a_streamed_step_is_escaped(support_agent: Any, support_users: Any) -> None:
    trace = make_run(support_agent, support_users[0])
    Step.objects.create(
        trace=trace,
        step_number=1,
        phase="reasoning",
        thought='<img src=x onerror="alert(1)">',
        action_type="tool",
        tool_name="get_order",
        action_input={"order_id": "</code><script>alert(2)</script>"},
        started_at=timezone.now(),
    )

    async def scenario() -> dict:
        comm = communicator(trace, support_users[0])
        await comm.connect(timeout=RECEIVE_TIMEOUT)
        message = await comm.receive_json_from(timeout=RECEIVE_TIMEOUT)
        await comm.disconnect()
        return message

    html = async_to_sync(scenario)()["html"]
    assert "<img" not in html and "<script>" not in html
    assert "&lt;img src=x" in html and "&lt;script&gt;alert(2)" in html


def test_frames_a_client_sends_are_ignored_whatever_they_hold(
    support_agent: Any, support_users: Any
) -> None:
    """The stream is one-way: text that is not JSON, or a binary frame, neither closes the
    socket nor stops the steps that follow."""
    trace = make_run(support_agent, support_users[0], steps=1)

    async def scenario() -> tuple[list[int], dict]:
        comm = communicator(trace, support_users[0])
        connected, _ = await comm.connect(timeout=RECEIVE_TIMEOUT)
        assert connected
        first = await receive_until_status(comm)
        await comm.send_to(text_data="not json {")
        await comm.send_to(bytes_data=b"\x00\xff")
        await sync_to_async(Step.objects.create)(
            trace=trace,
            step_number=2,
            phase="reasoning",
            thought="two",
            started_at=timezone.now(),
        )
        await steps_publish(list(await sync_to_async(list)(trace.steps.filter(step_number=2))))
        second = await comm.receive_json_from(timeout=RECEIVE_TIMEOUT)
        await comm.disconnect()
        return first[0] + [second["step"]], first[1]

    numbers, _ = async_to_sync(scenario)()
    assert numbers == [1, 2]
