"""Declarative contract drifts: each kind refuses the old contract with a readable error
body, serves the new one, and the staff API and admin manage the rows."""

import json
import time

import pytest
from django.core.exceptions import ValidationError

from policies.error_bodies import error_body_parse
from sandbox.faults import drift_state_reset
from sandbox.models import ContractDrift
from sandbox.services import contractdrift_set
from tests.sandbox.conftest import API
from tests.sandbox.factories import (
    InventoryFactory,
    OrderFactory,
    ProductFactory,
    SkuFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_upstream():
    drift_state_reset()
    yield
    drift_state_reset()


def _hints(response):
    headers = {key: value for key, value in response.items()}
    return error_body_parse(response.status_code, headers, response.content.decode())


def test_prefix_dropped_refuses_the_prefixed_id_and_serves_the_bare_one(client):
    OrderFactory(numeric_id=1234567)
    contractdrift_set(endpoint="orders", kind="prefix_dropped", param="order_id", old="#W")

    refused = client.get(f"{API}/orders/%23W1234567")
    served = client.get(f"{API}/orders/1234567")

    assert refused.status_code == 400
    assert _hints(refused).hints_for("order_id").forbidden_prefix == "#W"
    assert served.status_code == 200
    assert served.json()["order_id"] == "#W1234567"
    assert served["X-Sandbox-Drift"] == "prefix_dropped"


def test_prefix_changed_quotes_the_pattern_in_problem_json(client):
    OrderFactory(numeric_id=1234567)
    contractdrift_set(
        endpoint="returns",
        kind="prefix_changed",
        param="order_id",
        old="#W",
        new="W-",
        pattern=r"^W-\d{7}$",
        layout="problem",
    )

    refused = client.get(f"{API}/returns/%23W1234567")
    served = client.get(f"{API}/returns/W-1234567")

    assert refused.status_code == 400
    assert refused["Content-Type"] == "application/problem+json"
    parsed = _hints(refused)
    assert parsed.layout == "problem"
    hints = parsed.hints_for("order_id")
    assert hints.required_prefix == "W-"
    assert hints.expected_pattern == r"^W-\d{7}$"
    assert served.status_code == 200
    assert served.json()["order_id"] == "#W1234567"


def test_prefix_added_wants_the_new_prefix(client):
    SkuFactory(sku="AWH-2041-BLK")
    contractdrift_set(endpoint="skus", kind="prefix_added", param="sku", new="sku:")

    assert client.get(f"{API}/skus/AWH-2041-BLK").status_code == 400
    assert client.get(f"{API}/skus/sku:AWH-2041-BLK").json()["sku"] == "AWH-2041-BLK"


def test_case_drift_in_the_pydantic_layout(client):
    SkuFactory(sku="AWH-2041-BLK")
    contractdrift_set(
        endpoint="skus", kind="case", param="sku", old="upper", new="lower", layout="pydantic"
    )

    refused = client.get(f"{API}/skus/AWH-2041-BLK")
    served = client.get(f"{API}/skus/awh-2041-blk")

    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["path", "sku"]
    assert _hints(refused).hints_for("sku").expected_case == "lower"
    assert served.status_code == 200
    assert served.json()["sku"] == "AWH-2041-BLK"


def test_separator_drift_in_the_errors_layout(client):
    InventoryFactory(sku=SkuFactory(sku="AWH-2041-BLK"))
    contractdrift_set(
        endpoint="inventory",
        kind="separator",
        param="sku",
        old="-",
        new="_",
        pattern=r"^[A-Z]{2,4}_\d{4}_[A-Z0-9]{2,4}$",
        layout="errors",
    )

    refused = client.get(f"{API}/inventory/AWH-2041-BLK")
    served = client.get(f"{API}/inventory/AWH_2041_BLK")

    assert refused.status_code == 400
    assert refused.json()["errors"][0]["field"] == "sku"
    assert _hints(refused).hints_for("sku").expected_pattern.startswith("^[A-Z]{2,4}_")
    assert served.status_code == 200
    assert served.json()["sku"] == "AWH-2041-BLK"


def test_integer_drift_takes_a_json_integer_in_the_body(client):
    order = OrderFactory(numeric_id=1234567, status="delivered")
    contractdrift_set(endpoint="returns_create", kind="integer", param="order_id", old="#W")

    refused = client.post(
        f"{API}/returns",
        data=json.dumps({"order_id": "#W1234567", "reason": "too small"}),
        content_type="application/json",
    )
    digits_as_text = client.post(
        f"{API}/returns",
        data=json.dumps({"order_id": "1234567", "reason": "too small"}),
        content_type="application/json",
    )

    assert refused.status_code == 400
    assert _hints(refused).hints_for("order_id").expected_type == "integer"
    # In a JSON body a string of digits is still a string.
    assert digits_as_text.status_code == 400
    served = client.post(
        f"{API}/returns",
        data=json.dumps({"order_id": 1234567, "reason": "too small"}),
        content_type="application/json",
    )
    assert served.status_code in (201, 409), served.content
    assert served.json().get("order_id", order.order_id) == order.order_id


def test_param_renamed_in_the_text_layout(client):
    product = ProductFactory(name="Aurora Wireless Headphones")
    SkuFactory(product=product)
    contractdrift_set(
        endpoint="products", kind="param_renamed", old="q", new="search", layout="text"
    )

    refused = client.get(f"{API}/products?q=aurora")
    served = client.get(f"{API}/products?search=aurora")

    assert refused.status_code == 400
    assert refused["Content-Type"].startswith("text/plain")
    hints = _hints(refused).hints_for("q")
    assert (hints.unknown_name, hints.suggested_name) == ("q", "search")
    assert served.status_code == 200
    assert [r["product_id"] for r in served.json()["results"]] == [product.product_id]


def test_param_required_lists_its_values(client):
    ProductFactory(name="Aurora Wireless Headphones")
    contractdrift_set(
        endpoint="products",
        kind="param_required",
        new="api_version",
        values=["2024-10-01"],
        layout="detail",
    )

    missing = client.get(f"{API}/products?q=aurora")
    wrong = client.get(f"{API}/products?q=aurora&api_version=1")
    served = client.get(f"{API}/products?q=aurora&api_version=2024-10-01")

    assert missing.status_code == 400
    hints = _hints(missing).hints_for(None)
    assert hints.required and hints.allowed_values == ("2024-10-01",)
    assert wrong.status_code == 400
    assert served.status_code == 200 and served.json()["results"]


def test_enum_renamed_maps_request_and_response_values(client):
    OrderFactory(numeric_id=1234567, status="shipped")
    contractdrift_set(
        endpoint="orders",
        kind="enum_renamed",
        param="status",
        values={"shipped": "in_transit", "delivered": "completed"},
    )

    body = client.get(f"{API}/orders/%23W1234567").json()

    assert body["status"] == "in_transit"


def test_date_format_rewrites_response_dates(client):
    OrderFactory(numeric_id=1234567)
    contractdrift_set(endpoint="orders", kind="date_format", new="%d/%m/%Y")

    body = client.get(f"{API}/orders/%23W1234567").json()

    day, month, year = body["placed_at"].split("/")
    assert len(year) == 4 and 1 <= int(month) <= 12 and 1 <= int(day) <= 31


def test_field_renamed_renames_a_response_field(client):
    order = OrderFactory(numeric_id=1234567)
    contractdrift_set(endpoint="orders", kind="field_renamed", old="status", new="state")

    body = client.get(f"{API}/orders/%23W1234567").json()

    assert body["state"] == order.status and "status" not in body


@pytest.mark.parametrize(("kind", "status"), [("unavailable", 503), ("rate_limited", 429)])
def test_retry_drifts_answer_once_the_asked_wait_has_passed(client, kind, status):
    SkuFactory(sku="AWH-2041-BLK")
    contractdrift_set(endpoint="skus", kind=kind, retry_after_s=0.2)

    first = client.get(f"{API}/skus/AWH-2041-BLK")
    too_soon = client.get(f"{API}/skus/AWH-2041-BLK")
    other_call = client.get(f"{API}/skus/AWH-9999-BLK")
    # Call again until the API answers: a repeat too soon is asked to wait again, one after
    # the asked wait is answered (polled, with no bound on how long the wait took).
    deadline = time.monotonic() + 30
    after_wait = client.get(f"{API}/skus/AWH-2041-BLK")
    while after_wait.status_code == status and time.monotonic() < deadline:
        time.sleep(0.05)  # between polls
        after_wait = client.get(f"{API}/skus/AWH-2041-BLK")

    assert first.status_code == status
    assert first["Retry-After"] == "1"
    assert _hints(first).retry_after == 1.0
    assert too_soon.status_code == status
    assert other_call.status_code == status  # each distinct call is asked to wait
    assert after_wait.status_code == 200


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"kind": "prefix_dropped", "param": "order_id"}, "old"),
        ({"kind": "case", "param": "sku", "old": "upper", "new": "upper"}, "new"),
        ({"kind": "case", "param": "sku", "old": "upper", "new": "title"}, "new"),
        ({"kind": "param_required", "new": "v", "values": []}, "values"),
        ({"kind": "enum_renamed", "param": "status", "values": ["a"]}, "values"),
        ({"kind": "date_format", "new": "%Q"}, "new"),
        ({"kind": "separator", "param": "sku", "old": "-", "new": "_", "pattern": "(["}, "pattern"),
        ({"kind": "field_renamed", "old": "status", "new": "status"}, "new"),
    ],
)
def test_invalid_drifts_are_refused_with_the_field(fields, field):
    with pytest.raises(ValidationError) as error:
        contractdrift_set(endpoint="orders", **fields)

    assert field in error.value.message_dict
    assert not ContractDrift.objects.exists()


def test_drift_api_requires_the_permission(client):
    response = client.post(
        f"{API}/_drifts",
        data=json.dumps({"endpoint": "orders", "kind": "unavailable"}),
        content_type="application/json",
    )

    assert response.status_code == 403
    assert not ContractDrift.objects.exists()


def test_drift_api_creates_changes_lists_and_deletes(injector_client):
    created = injector_client.post(
        f"{API}/_drifts",
        data=json.dumps(
            {"endpoint": "skus", "kind": "case", "param": "sku", "old": "upper", "new": "lower"}
        ),
        content_type="application/json",
    )
    assert created.status_code == 201, created.content
    drift_id = created.json()["id"]

    changed = injector_client.patch(
        f"{API}/_drifts/{drift_id}",
        data=json.dumps({"layout": "problem", "enabled": False}),
        content_type="application/json",
    )
    listed = injector_client.get(f"{API}/_drifts").json()
    deleted = injector_client.delete(f"{API}/_drifts/{drift_id}")

    assert changed.json()["layout"] == "problem" and changed.json()["enabled"] is False
    assert [d["id"] for d in listed["results"]] == [drift_id]
    assert "rate_limited" in listed["kinds"]
    assert deleted.json() == {"id": drift_id, "deleted": True}
    again = injector_client.delete(f"{API}/_drifts/{drift_id}")
    assert (again.status_code, again.json()["deleted"]) == (200, False)
    assert not ContractDrift.objects.exists()


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({"endpoint": "orders", "kind": "nope"}, 400, "kind"),
        ({"endpoint": "orders", "kind": "unavailable", "retry_after_s": "1"}, 400, "number"),
        ({"endpoint": "orders", "kind": "unavailable", "colour": "red"}, 400, "colour"),
        ({"endpoint": "orders", "kind": "unavailable", "retry_after_s": 99}, 400, "retry_after"),
        (["not", "an", "object"], 400, "object"),
    ],
)
def test_drift_api_refuses_bad_input_clearly(injector_client, body, status, needle):
    response = injector_client.post(
        f"{API}/_drifts", data=json.dumps(body), content_type="application/json"
    )

    assert response.status_code == status
    assert needle in response.content.decode()
    assert response.json()["error"] in ("invalid_drift", "type_mismatch")
    assert not ContractDrift.objects.exists()


def test_unknown_drift_id_is_a_json_404(injector_client):
    response = injector_client.patch(
        f"{API}/_drifts/999", data=json.dumps({"enabled": False}), content_type="application/json"
    )

    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_admin_lists_drifts(admin_client):
    contractdrift_set(endpoint="orders", kind="unavailable")

    response = admin_client.get("/admin/sandbox/contractdrift/")

    assert response.status_code == 200
    assert b"unavailable" in response.content


def test_request_side_date_and_enum_drifts_refuse_the_old_values(client):
    ProductFactory(name="Aurora Wireless Headphones")
    contractdrift_set(endpoint="products", kind="date_format", param="since", new="%d/%m/%Y")
    contractdrift_set(
        endpoint="products", kind="enum_renamed", param="sort", values={"price": "unit_price"}
    )

    old_date = client.get(f"{API}/products?q=aurora&since=2026-11-03")
    old_enum = client.get(f"{API}/products?q=aurora&since=03/11/2026&sort=price")
    served = client.get(f"{API}/products?q=aurora&since=03/11/2026&sort=unit_price")

    assert old_date.status_code == 400
    assert _hints(old_date).hints_for("since").expected_format == "%d/%m/%Y"
    assert old_enum.status_code == 400
    assert _hints(old_enum).hints_for("sort").allowed_values == ("unit_price",)
    assert served.status_code == 200 and served.json()["results"]
