import random

import pytest

from sandbox.faults import FAULT_HEADER, fault_cache_clear, fault_kind_for_draw
from sandbox.models import FaultRule
from sandbox.services import faultrule_set
from tests.sandbox.conftest import API
from tests.sandbox.factories import OrderFactory, OrderItemFactory, ShopUserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("rate_field", "status", "error"),
    [
        ("rate_404", 404, "not_found"),
        ("rate_500", 500, "internal_error"),
        ("rate_401", 401, "unauthorized"),
        ("rate_429", 429, "rate_limited"),
    ],
)
def test_error_faults_fire_at_rate_one(client, rate_field, status, error):
    # given a user that exists, and a rule that always fails the users endpoint
    user = ShopUserFactory()
    faultrule_set(endpoint="users", **{rate_field: 1.0})

    # when the user is fetched
    response = client.get(f"{API}/users/{user.user_id}")

    # then the injected fault answers instead
    assert response.status_code == status
    assert response.json()["error"] == error
    assert response[FAULT_HEADER] == str(status)


def test_fault_bodies_match_the_documented_texts(client):
    faultrule_set(endpoint="users", rate_500=1.0)
    faultrule_set(endpoint="products", rate_401=1.0)

    internal = client.get(f"{API}/users/U00000001").json()
    unauthorized = client.get(f"{API}/products?q=x").json()

    assert internal == {"error": "internal_error", "detail": "upstream database unavailable"}
    assert unauthorized == {"error": "unauthorized", "detail": "invalid or expired token"}


def test_rate_limit_fault_sets_retry_after(client):
    faultrule_set(endpoint="articles", rate_429=1.0)

    response = client.get(f"{API}/articles?q=returns")

    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert response.json()["retry_after"] == int(response["Retry-After"])


def test_timeout_fault_hangs_then_answers_504(client):
    faultrule_set(endpoint="users", rate_timeout=1.0, timeout_seconds=0.05)

    response = client.get(f"{API}/users/U00000001")

    assert response.status_code == 504
    assert response.json()["error"] == "timeout"
    assert response[FAULT_HEADER] == "timeout"


def test_slow_fault_still_answers_normally(client):
    user = ShopUserFactory()
    faultrule_set(endpoint="users", rate_slow=1.0, slow_ms=1)

    response = client.get(f"{API}/users/{user.user_id}")

    assert response.status_code == 200
    assert response.json()["user_id"] == user.user_id
    assert response[FAULT_HEADER] == "slow"


def test_faults_only_affect_their_endpoint(client):
    user = ShopUserFactory()
    faultrule_set(endpoint="user_orders", rate_500=1.0)

    response = client.get(f"{API}/users/{user.user_id}")

    assert response.status_code == 200
    assert FAULT_HEADER not in response


def test_disabled_rule_injects_nothing(client):
    user = ShopUserFactory()
    faultrule_set(endpoint="users", rate_500=1.0, enabled=False)

    response = client.get(f"{API}/users/{user.user_id}")

    assert response.status_code == 200


def test_zero_rates_inject_nothing(client):
    user = ShopUserFactory()
    faultrule_set(endpoint="users")

    response = client.get(f"{API}/users/{user.user_id}")

    assert response.status_code == 200
    assert FAULT_HEADER not in response


def test_fault_fires_before_input_validation(client):
    # An upstream outage answers 500 whatever the request looked like.
    faultrule_set(endpoint="orders", rate_500=1.0)

    response = client.get(f"{API}/orders/garbage")

    assert response.status_code == 500


def test_post_endpoint_gets_faults_too(client):
    faultrule_set(endpoint="returns_create", rate_429=1.0)

    response = client.post(f"{API}/returns", data={}, content_type="application/json")

    assert response.status_code == 429


def test_rename_field_drift_renames_top_level_status(client):
    order = OrderFactory(numeric_id=1234567)
    faultrule_set(endpoint="orders", drift=FaultRule.Drift.RENAME_FIELD)

    response = client.get(f"{API}/orders/%23W1234567")

    body = response.json()
    assert response.status_code == 200
    assert "status" not in body
    assert body["shipping_status"] == order.status
    assert list(body)[:4] == ["order_id", "user_id", "shipping_status", "placed_at"]
    assert response["X-Sandbox-Drift"] == "rename_field"


def test_rename_field_drift_with_custom_names(client):
    user = ShopUserFactory()
    faultrule_set(endpoint="users", drift="rename_field", drift_from="email", drift_to="mail")

    body = client.get(f"{API}/users/{user.user_id}").json()

    assert body["mail"] == user.email
    assert "email" not in body


def test_rename_field_drift_leaves_error_bodies_alone(client):
    faultrule_set(endpoint="users", drift="rename_field", drift_from="detail", drift_to="message")

    body = client.get(f"{API}/users/U00000009").json()

    assert body["detail"] == "user U00000009 not found"


@pytest.mark.parametrize("path", ["orders/1234567", "returns/1234567"])
def test_require_int_id_accepts_bare_integer(client, path):
    OrderFactory(numeric_id=1234567)
    endpoint = path.split("/")[0]
    faultrule_set(endpoint=endpoint, drift=FaultRule.Drift.REQUIRE_INT_ID)

    response = client.get(f"{API}/{path}")

    assert response.status_code == 200
    assert response.json()["order_id"] == "#W1234567"


@pytest.mark.parametrize("endpoint", ["orders", "returns"])
def test_require_int_id_rejects_hash_w_id(client, endpoint):
    OrderFactory(numeric_id=1234567)
    faultrule_set(endpoint=endpoint, drift=FaultRule.Drift.REQUIRE_INT_ID)

    response = client.get(f"{API}/{endpoint}/%23W1234567")

    assert response.status_code == 400
    assert response.json() == {
        "error": "type_mismatch",
        "field": "order_id",
        "expected_type": "integer",
        "detail": "order_id must be an integer, got '#W1234567'",
    }


def test_require_int_id_on_return_creation(client):
    order = OrderFactory(numeric_id=1234567)
    OrderItemFactory(order=order)
    faultrule_set(endpoint="returns_create", drift=FaultRule.Drift.REQUIRE_INT_ID)

    refused = client.post(
        f"{API}/returns",
        data={"order_id": "#W1234567", "reason": "x"},
        content_type="application/json",
    )
    accepted = client.post(
        f"{API}/returns", data={"order_id": 1234567, "reason": "x"}, content_type="application/json"
    )

    assert refused.status_code == 400
    assert refused.json()["error"] == "type_mismatch"
    assert accepted.status_code == 201


def test_unknown_integer_id_is_404_under_require_int_id(client):
    faultrule_set(endpoint="orders", drift=FaultRule.Drift.REQUIRE_INT_ID)

    response = client.get(f"{API}/orders/7777777")

    assert response.status_code == 404


def test_seeded_rule_gives_reproducible_sequence(client):
    # given a seeded rule failing about half the requests
    faultrule_set(endpoint="users", rate_500=0.5, seed=1234)
    first = [client.get(f"{API}/users/U00000001").status_code for _ in range(12)]

    # when the same rule is saved again (which restarts its sequence)
    faultrule_set(endpoint="users", rate_500=0.5, seed=1234)
    second = [client.get(f"{API}/users/U00000001").status_code for _ in range(12)]

    # then both runs see the same faults, exactly those of random.Random(seed)
    draws = random.Random(1234)
    expected = [500 if draws.random() < 0.5 else 404 for _ in range(12)]
    assert first == second == expected
    assert {500, 404} == set(first)


def test_rule_changes_take_effect_once_cache_is_cleared(client):
    user = ShopUserFactory()
    rule = FaultRule.objects.create(endpoint="users", rate_500=1.0)
    assert client.get(f"{API}/users/{user.user_id}").status_code == 500

    # A write from elsewhere (admin, another process) lands in the database.
    FaultRule.objects.filter(pk=rule.pk).update(rate_500=0.0)
    fault_cache_clear()  # stands in for the one-second expiry

    assert client.get(f"{API}/users/{user.user_id}").status_code == 200


@pytest.mark.parametrize(
    ("draw", "expected"),
    [
        (0.00, "404"),
        (0.09, "404"),
        (0.10, "500"),
        (0.29, "500"),
        (0.31, "401"),
        (0.45, "429"),
        (0.55, "timeout"),
        (0.65, "slow"),
        (0.75, None),
        (0.99, None),
    ],
)
def test_draw_maps_onto_cumulative_buckets(draw, expected):
    rates = (0.1, 0.2, 0.1, 0.1, 0.1, 0.1)

    assert fault_kind_for_draw(rates=rates, draw=draw) == expected
