import pytest
from django.urls import reverse

from sandbox.models import FaultRule, Order

MODELS = [
    "shopuser",
    "product",
    "sku",
    "inventory",
    "promotion",
    "order",
    "orderitem",
    "returnrequest",
    "article",
    "faultrule",
]


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.django_db
def test_admin_changelists_render(admin_client, shop, model):
    FaultRule.objects.create(endpoint="orders", rate_500=0.1)

    response = admin_client.get(reverse(f"admin:sandbox_{model}_changelist"))

    assert response.status_code == 200


@pytest.mark.django_db
def test_admin_order_change_page_renders(admin_client, shop):
    order = Order.objects.first()

    response = admin_client.get(reverse("admin:sandbox_order_change", args=[order.pk]))

    assert response.status_code == 200
