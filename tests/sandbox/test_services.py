import pytest
from django.core.exceptions import ValidationError

from sandbox.models import FaultRule, ReturnRequest
from sandbox.services import (
    ReturnNotAllowed,
    faultrule_clear,
    faultrule_set,
    return_request_create,
)
from tests.sandbox.factories import OrderFactory, OrderItemFactory

pytestmark = pytest.mark.django_db


def test_return_request_create_refunds_listed_skus():
    order = OrderFactory()
    kept = OrderItemFactory(order=order, quantity=1)
    returned = OrderItemFactory(order=order, quantity=3)

    created = return_request_create(order=order, reason="Wrong size", skus=[returned.sku.sku])

    assert created.status == ReturnRequest.Status.REQUESTED
    assert created.skus == [returned.sku.sku]
    assert created.refund_amount == returned.unit_price * 3
    assert kept.sku.sku not in created.skus


def test_return_request_create_refuses_undelivered_order():
    order = OrderFactory(status="shipped", delivered_at=None)

    with pytest.raises(ReturnNotAllowed) as refused:
        return_request_create(order=order, reason="x", skus=None)

    assert refused.value.code == "not_eligible"
    assert not ReturnRequest.objects.exists()


def test_faultrule_set_then_clear_one_and_all():
    faultrule_set(endpoint="orders", rate_500=0.1)
    faultrule_set(endpoint="skus", rate_404=0.1)

    assert faultrule_clear(endpoint="orders") == 1
    assert list(FaultRule.objects.values_list("endpoint", flat=True)) == ["skus"]
    assert faultrule_clear() == 1
    assert not FaultRule.objects.exists()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"endpoint": "checkout"},
        {"endpoint": "orders", "rate_500": 0.7, "rate_429": 0.7},
        {"endpoint": "orders", "surprise": 1},
    ],
)
def test_faultrule_set_validates(kwargs):
    with pytest.raises(ValidationError):
        faultrule_set(**kwargs)

    assert not FaultRule.objects.exists()
