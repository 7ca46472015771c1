import base64
import json

import pytest

from sandbox.models import FaultRule
from sandbox.services import faultrule_set
from tests.sandbox.conftest import API

pytestmark = pytest.mark.django_db


def _send(client, method, path, body=None, **extra):
    if method == "get":
        return client.get(path, **extra)
    data = json.dumps(body) if body is not None else ""
    return getattr(client, method)(path, data=data, content_type="application/json", **extra)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "_faults"),
        ("get", "_faults/orders"),
        ("put", "_faults/orders"),
        ("patch", "_faults/orders"),
        ("delete", "_faults/orders"),
    ],
)
def test_anonymous_is_forbidden(client, method, path):
    response = _send(client, method, f"{API}/{path}", {"rate_500": 1.0})

    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"
    assert not FaultRule.objects.exists()


@pytest.mark.parametrize("flags", [{}, {"is_staff": True}], ids=["plain", "staff"])
def test_user_without_the_permission_is_forbidden(client, django_user_model, flags):
    user = django_user_model.objects.create_user(username="plain", password="pw-plain", **flags)
    client.force_login(user)

    response = _send(client, "put", f"{API}/_faults/orders", {"rate_500": 1.0})

    assert response.status_code == 403
    assert "sandbox.inject_faults" in response.json()["detail"]
    assert not FaultRule.objects.exists()


def test_basic_auth_without_the_permission_is_forbidden(client, django_user_model):
    django_user_model.objects.create_user(username="plain", password="pw-plain", is_staff=True)
    token = base64.b64encode(b"plain:pw-plain").decode()

    response = _send(
        client,
        "put",
        f"{API}/_faults/orders",
        {"rate_500": 1.0},
        HTTP_AUTHORIZATION=f"Basic {token}",
    )

    assert response.status_code == 403
    assert not FaultRule.objects.exists()


def test_wrong_basic_password_is_forbidden(client, fault_injector):
    token = base64.b64encode(b"faults-admin:wrong").decode()

    response = client.get(f"{API}/_faults", HTTP_AUTHORIZATION=f"Basic {token}")

    assert response.status_code == 403


def test_injector_via_basic_auth_sets_rule_without_csrf(client, basic_auth_header):
    csrf_client = client.__class__(enforce_csrf_checks=True)

    response = _send(
        csrf_client, "put", f"{API}/_faults/orders", {"rate_500": 0.25}, **basic_auth_header
    )

    assert response.status_code == 200
    assert FaultRule.objects.get(endpoint="orders").rate_500 == 0.25


def test_session_auth_still_needs_csrf_for_writes(client, fault_injector):
    csrf_client = client.__class__(enforce_csrf_checks=True)
    csrf_client.force_login(fault_injector)

    response = _send(csrf_client, "put", f"{API}/_faults/orders", {"rate_500": 0.25})

    assert response.status_code == 403
    assert "CSRF" in response.json()["detail"]


def test_put_creates_rule_with_defaults(injector_client):
    response = _send(injector_client, "put", f"{API}/_faults/orders", {"rate_429": 0.3, "seed": 9})

    assert response.status_code == 200
    body = response.json()
    assert body | {"updated_at": None} == {
        "endpoint": "orders",
        "enabled": True,
        "rate_404": 0.0,
        "rate_500": 0.0,
        "rate_401": 0.0,
        "rate_429": 0.3,
        "rate_timeout": 0.0,
        "rate_slow": 0.0,
        "timeout_seconds": 10.0,
        "slow_ms": 1500,
        "drift": "none",
        "drift_from": "status",
        "drift_to": "shipping_status",
        "seed": 9,
        "updated_at": None,
    }


def test_put_replaces_while_patch_merges(injector_client):
    faultrule_set(endpoint="orders", rate_500=0.5, rate_404=0.2)

    patched = _send(injector_client, "patch", f"{API}/_faults/orders", {"rate_401": 0.1}).json()
    replaced = _send(injector_client, "put", f"{API}/_faults/orders", {"rate_401": 0.1}).json()

    assert (patched["rate_500"], patched["rate_404"], patched["rate_401"]) == (0.5, 0.2, 0.1)
    assert (replaced["rate_500"], replaced["rate_404"], replaced["rate_401"]) == (0.0, 0.0, 0.1)
    assert FaultRule.objects.count() == 1


def test_get_lists_rules_and_endpoints(injector_client):
    faultrule_set(endpoint="skus", rate_404=0.5)
    faultrule_set(endpoint="articles", rate_slow=0.5)

    body = injector_client.get(f"{API}/_faults").json()

    assert [rule["endpoint"] for rule in body["results"]] == ["articles", "skus"]
    assert body["endpoints"] == list(FaultRule.Endpoint.values)
    assert len(body["endpoints"]) == 12


def test_get_single_rule(injector_client):
    faultrule_set(endpoint="skus", rate_404=0.5)

    assert injector_client.get(f"{API}/_faults/skus").json()["rate_404"] == 0.5
    assert injector_client.get(f"{API}/_faults/orders").status_code == 404


def test_delete_removes_rule(injector_client):
    faultrule_set(endpoint="skus", rate_404=0.5)

    response = injector_client.delete(f"{API}/_faults/skus")

    assert response.json() == {"endpoint": "skus", "deleted": True}
    assert not FaultRule.objects.exists()


def test_changed_rule_applies_to_next_request(injector_client):
    _send(injector_client, "put", f"{API}/_faults/products", {"rate_500": 1.0})
    assert injector_client.get(f"{API}/products?q=x").status_code == 500

    injector_client.delete(f"{API}/_faults/products")

    assert injector_client.get(f"{API}/products?q=x").status_code == 200


@pytest.mark.parametrize(
    ("body", "detail_part"),
    [
        ({"rate_500": 0.6, "rate_404": 0.6}, "rates must sum to at most 1.0"),
        ({"rate_500": 1.5}, "rate_500"),
        ({"rate_500": -0.1}, "rate_500"),
        ({"timeout_seconds": -1}, "timeout_seconds"),
        ({"drift": "explode"}, "drift"),
        ({"drift": "rename_field", "drift_from": "status", "drift_to": "status"}, "drift_to"),
        ({"colour": "red"}, "colour: unknown field"),
    ],
)
def test_invalid_rules_are_rejected_with_clear_message(injector_client, body, detail_part):
    response = _send(injector_client, "put", f"{API}/_faults/orders", body)

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_fault_rule"
    assert detail_part in response.json()["detail"]
    assert not FaultRule.objects.exists()


@pytest.mark.parametrize("body", [{"rate_500": True}, {"rate_500": "0.5"}, {"seed": "abc"}])
def test_non_numeric_rates_are_type_mismatch(injector_client, body):
    response = _send(injector_client, "put", f"{API}/_faults/orders", body)

    assert response.status_code == 400
    assert response.json()["error"] == "type_mismatch"


def test_require_int_id_is_refused_for_endpoints_without_order_id(injector_client):
    response = _send(injector_client, "put", f"{API}/_faults/skus", {"drift": "require_int_id"})

    assert response.status_code == 400
    assert "require_int_id only applies to" in response.json()["detail"]


def test_unknown_endpoint_is_404(injector_client):
    response = _send(injector_client, "put", f"{API}/_faults/checkout", {"rate_500": 0.1})

    assert response.status_code == 404
    assert "checkout" in response.json()["detail"]


def test_malformed_json_body_is_400(injector_client):
    response = injector_client.put(
        f"{API}/_faults/orders", data="{nope", content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_json"


@pytest.mark.parametrize(
    "raw",
    [
        '{"rate_500": NaN}',
        '{"rate_500": Infinity}',
        '{"timeout_seconds": -Infinity}',
        '{"rate_500": 1e999}',
        pytest.param("[" * 100_000, id="100k-nested-arrays"),
    ],
)
def test_non_finite_numbers_and_deep_nesting_are_invalid_json(injector_client, raw):
    response = injector_client.put(
        f"{API}/_faults/orders", data=raw, content_type="application/json"
    )

    assert response.status_code == 400
    assert response.json()["error"] == "invalid_json"
    assert not FaultRule.objects.exists()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"drift_from": None}, "string"),
        ({"drift_to": []}, "string"),
        ({"drift": {}}, "string"),
        ({"enabled": 1}, "boolean"),
        ({"enabled": None}, "boolean"),
        ({"slow_ms": 1.5}, "integer"),
        ({"seed": 2.5}, "integer"),
        ({"rate_500": None}, "number"),
    ],
)
def test_fields_of_the_wrong_json_type_are_type_mismatch(injector_client, body, expected):
    response = _send(injector_client, "put", f"{API}/_faults/orders", body)

    assert response.status_code == 400
    assert response.json()["error"] == "type_mismatch"
    assert response.json()["expected_type"] == expected
    assert not FaultRule.objects.exists()


@pytest.mark.parametrize("text", ["status\x00", "\ud800"])
def test_strings_the_database_cannot_store_are_refused(injector_client, text):
    raw = json.dumps({"drift": "rename_field", "drift_from": text, "drift_to": "state"})

    response = injector_client.put(
        f"{API}/_faults/orders", data=raw, content_type="application/json"
    )

    assert response.status_code == 400
    assert not FaultRule.objects.exists()


def test_integral_numbers_and_a_null_seed_are_accepted(injector_client):
    response = _send(
        injector_client, "put", f"{API}/_faults/orders", {"slow_ms": 2000.0, "seed": None}
    )

    assert response.status_code == 200
    assert (response.json()["slow_ms"], response.json()["seed"]) == (2000, None)


@pytest.mark.parametrize("scheme", ["Token", "Bearer"])
def test_other_credentials_are_refused_with_what_the_fault_api_takes(
    client, fault_injector, scheme
):
    # An ops user holding the permission, trying the /api/ token: say what works instead.
    response = client.put(
        f"{API}/_faults/orders",
        data=json.dumps({"rate_500": 1.0}),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"{scheme} 9944b09199c62bcf9418ad846dd0e4bbdfc6ee4b",
    )

    assert response.status_code == 403
    assert "HTTP Basic or a signed-in session" in response.json()["detail"]
    assert scheme in response.json()["detail"]
    assert not FaultRule.objects.exists()
