"""``Idempotency-Key`` on POST /returns: a repeated request is answered, not run again."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from sandbox.faults import fault_cache_clear
from sandbox.idempotency import STALE_CLAIM_S
from sandbox.models import FaultRule, IdempotentRequest, ReturnRequest
from tests.sandbox.conftest import API
from tests.sandbox.factories import OrderItemFactory

pytestmark = pytest.mark.django_db


def _post(client: Client, body: dict[str, Any], key: str | None) -> Any:
    headers = {} if key is None else {"HTTP_IDEMPOTENCY_KEY": key}
    return client.post(
        f"{API}/returns", data=json.dumps(body), content_type="application/json", **headers
    )


def test_the_same_request_again_is_answered_from_the_record_and_runs_once(
    client: Client,
) -> None:
    item = OrderItemFactory()
    body = {"order_id": item.order.order_id, "reason": "Wrong size"}

    first = _post(client, body, "k-1")
    again = _post(client, body, "k-1")
    third = _post(client, body, "k-1")

    assert first.status_code == again.status_code == third.status_code == 201
    assert again.json() == first.json() and third.json() == first.json()
    assert "Idempotent-Replayed" not in first and again["Idempotent-Replayed"] == "true"
    assert ReturnRequest.objects.filter(order=item.order).count() == 1
    record = IdempotentRequest.objects.get(key="k-1")
    assert (record.endpoint, record.status, record.replays) == ("returns_create", 201, 2)


def test_without_the_header_a_second_request_runs_again(client: Client) -> None:
    item = OrderItemFactory()
    body = {"order_id": item.order.order_id, "reason": "Wrong size"}

    assert _post(client, body, None).status_code == 201
    assert _post(client, body, None).status_code == 409  # it ran: the order has a return now
    assert not IdempotentRequest.objects.exists()


def test_the_key_with_a_different_request_is_refused(client: Client) -> None:
    item = OrderItemFactory()
    _post(client, {"order_id": item.order.order_id, "reason": "Wrong size"}, "k-2")

    other = _post(client, {"order_id": item.order.order_id, "reason": "Broken"}, "k-2")

    assert other.status_code == 422
    assert other.json()["error"] == "idempotency_key_reused"
    assert ReturnRequest.objects.filter(order=item.order).count() == 1


def test_a_failed_request_keeps_nothing_and_its_retry_runs(client: Client) -> None:
    item = OrderItemFactory()
    body = {"order_id": item.order.order_id, "reason": "Wrong size"}
    FaultRule.objects.create(endpoint="returns_create", rate_500=1.0)
    fault_cache_clear()

    failed = _post(client, body, "k-3")

    assert failed.status_code == 500
    assert not IdempotentRequest.objects.filter(key="k-3").exists()
    FaultRule.objects.all().delete()
    fault_cache_clear()
    retried = _post(client, body, "k-3")
    assert retried.status_code == 201 and "Idempotent-Replayed" not in retried
    assert ReturnRequest.objects.filter(order=item.order).count() == 1


def test_a_key_still_running_is_409_and_a_dead_claim_is_taken_over(client: Client) -> None:
    item = OrderItemFactory()
    body = {"order_id": item.order.order_id, "reason": "Wrong size"}
    claim = _post(client, body, "k-4")  # to learn the fingerprint the claim must carry
    record = IdempotentRequest.objects.get(key="k-4")
    ReturnRequest.objects.filter(order=item.order).delete()
    # As if its first request were still running (claimed, not completed) ...
    IdempotentRequest.objects.filter(pk=record.pk).update(status=0, body=b"")

    busy = _post(client, body, "k-4")

    assert busy.status_code == 409 and busy.json()["error"] == "idempotency_key_in_use"
    # ... then as if it had died long ago: the next request takes the key over and runs.
    IdempotentRequest.objects.filter(pk=record.pk).update(
        updated_at=timezone.now() - timedelta(seconds=STALE_CLAIM_S + 1)
    )
    taken = _post(client, body, "k-4")
    assert claim.status_code == taken.status_code == 201
    assert "Idempotent-Replayed" not in taken
    assert ReturnRequest.objects.filter(order=item.order).count() == 1


@pytest.mark.parametrize("key", ["x" * 256, "bad\u0007key"])
def test_an_unusable_key_is_400(client: Client, key: str) -> None:
    item = OrderItemFactory()

    response = _post(client, {"order_id": item.order.order_id, "reason": "Wrong size"}, key)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_idempotency_key"
    assert not ReturnRequest.objects.exists()


def test_the_same_json_with_its_keys_in_another_order_is_the_same_request(
    client: Client,
) -> None:
    item = OrderItemFactory()
    order_id = item.order.order_id
    first = client.post(
        f"{API}/returns",
        data=f'{{"order_id": "{order_id}", "reason": "Wrong size"}}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k-5",
    )
    again = client.post(
        f"{API}/returns",
        data=f'{{"reason":"Wrong size","order_id":"{order_id}"}}',
        content_type="application/json",
        HTTP_IDEMPOTENCY_KEY="k-5",
    )
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true"
